//! The manual pages: clap_mangen's sections, with the text after the options in GNU's
//! sections (NOTES, EXIT STATUS) and a SEE ALSO that names only pages `barge man --dir`
//! writes.

use std::io;

use clap::{Command, CommandFactory};
use clap_mangen::Man;

use crate::Cli;

/// Every page, by file name: barge.1, then barge-COMMAND.1 for each visible command.
pub fn pages() -> io::Result<Vec<(String, Vec<u8>)>> {
    let mut top = Cli::command().disable_help_subcommand(true);
    top.build();
    let commands: Vec<&Command> = top.get_subcommands().filter(|c| !c.is_hide_set()).collect();
    let names: Vec<String> = commands.iter().map(|c| page_name(c)).collect();
    let mut pages = vec![(format!("{}.1", page_name(&top)), page(&top, &names)?)];
    for command in commands {
        let page = page(command, &[page_name(&top)])?;
        pages.push((format!("{}.1", page_name(command)), page));
    }
    Ok(pages)
}

/// `barge`, or `barge-pack` for a command.
fn page_name(command: &Command) -> String {
    let name = command.get_display_name().unwrap_or(command.get_name());
    name.to_string()
}

/// One page: NAME, SYNOPSIS, DESCRIPTION, OPTIONS, COMMANDS, NOTES, EXIT STATUS, SEE ALSO
/// (the `pages` given) and VERSION.
fn page(command: &Command, see_also: &[String]) -> io::Result<Vec<u8>> {
    let man = Man::new(command.clone());
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    if command.get_arguments().any(|arg| !arg.is_hide_set()) {
        man.render_options_section(&mut out)?;
    }
    if command.has_subcommands() {
        man.render_subcommands_section(&mut out)?;
    }
    let after = command.get_after_long_help().or(command.get_after_help());
    let after = after.map(|text| text.to_string()).unwrap_or_default();
    let (notes, exit_status) = after.split_once("Exit status:\n").unwrap_or((&after, ""));
    section(&mut out, "NOTES", notes)?;
    section(&mut out, "EXIT STATUS", exit_status)?;
    let named: Vec<String> = see_also.iter().map(|name| format!("{name}(1)")).collect();
    section(&mut out, "SEE ALSO", &named.join(", "))?;
    man.render_version_section(&mut out)?;
    Ok(out)
}

/// A section named `heading` holding `text` (nothing when it is empty), escaped for roff
/// by clap_mangen as it escapes the text after the options.
fn section(out: &mut Vec<u8>, heading: &str, text: &str) -> io::Result<()> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(());
    }
    let carrier = Command::new("barge").after_help(text.to_string());
    let mut body = Vec::new();
    Man::new(carrier).render_extra_section(&mut body)?;
    let body = String::from_utf8_lossy(&body);
    let body = body.replacen(".SH EXTRA", &format!(".SH \"{heading}\""), 1);
    out.extend_from_slice(body.as_bytes());
    Ok(())
}
