"""Renders bench/results/*.json as Markdown: the terminal tables and the generated part of
docs/BENCHMARKS.md (everything between the BEGIN and END markers; the rest is hand-written)."""

import glob
import importlib
import json
import os
import statistics

import lib

DOC = os.path.join(lib.ROOT, "docs", "BENCHMARKS.md")
BEGIN = "<!-- bench/run: generated from bench/results/*.json; edits below this line are lost -->"
END = "<!-- bench/run: end of the generated part -->"
# Syscalls that wait for other processes or threads: their time is not work done per file.
WAITS = {"wait4", "waitid", "vfork", "clone", "clone3", "futex", "poll", "ppoll", "epoll_wait",
         "select", "pselect6", "nanosleep", "clock_nanosleep"}


def _ms(s):
    ms = s * 1000
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}"


def _num(x, digits=2):
    return "" if x is None else f"{x:.{digits}f}"


def _cell(text):
    return text.replace("|", "\\|")


def _ref_label(r):
    return _cell(r["cases"][0]["label"])


def set_header(suite, name, r):
    """One line describing a set's run: size, time, commit, load."""
    line = (
        f"`{name}`: {r['files']:,} files, {r['dirs']:,} directories, {r['bytes'] / 2**20:,.0f} MiB;"
        f" run {r['when']}, barge {r['barge_commit']}, {r['pairs']} pairs"
        f" (load average up to {r['load_max']:.2f})"
    )
    if r.get("facts"):
        line += ". " + "; ".join(f"{k}: {v}" for k, v in r["facts"].items())
    if r["busy_procs"]:
        line += (
            f". **Noisy: other processes ({', '.join(r['busy_procs'])}) were running during"
            " this run; use these numbers for direction only.**"
        )
    return line


def group(label):
    """The group of a case label: its prefix up to ": " ("cold: " of "cold: cp -a"), or ""."""
    head, sep, _ = label.partition(": ")
    return head + sep if sep else ""


def _floor(r, grp=""):
    """The floor case of a group of cases measured together (labelled group + FLOOR)."""
    return next((c for c in r["cases"] if c["label"] == grp + lib.FLOOR), None)


def _label(c):
    """A case's label, flagged when its output was wrong (lib's ``wrong`` field)."""
    flag = f" **(copied wrong: {_cell(c['wrong'])})**" if c.get("wrong") else ""
    return _cell(c["label"]) + flag


def floor_ratio(c, floor):
    """Median over the rounds of c's time / the floor's time in the same round."""
    return statistics.median(a / b for a, b in zip(c["times"], floor["times"]))


# Optional columns: (result field, header, format), shown when a case of the set has the field.
EXTRA_COLUMNS = [
    ("recv_mib", "receiver peak MiB", lambda x: f"{x:.0f}"),
    ("link_share", "share of 1 Gbit/s", lambda x: f"{x:.1%}"),
]


def set_table(suite, name, r):
    """Markdown table of one suite run on one data set (with a "time / floor" column when the
    run has a floor case: each case against the floor of its group; and EXTRA_COLUMNS)."""
    floors = {group(c["label"]): _floor(r, group(c["label"])) for c in r["cases"]}
    floor = any(floors.values())
    extra = [col for col in EXTRA_COLUMNS if any(col[0] in c for c in r["cases"])]
    rows = [
        set_header(suite, name, r),
        "",
        f"| case | median ms | time / {_ref_label(r)} (median of per-pair ratios) "
        + ("| time / floor " if floor else "")
        + "| user ms | sys ms | sys µs/file | syscalls/file |"
        + "".join(f" {head} |" for _, head, _ in extra),
        "|---|--:|--:|" + ("--:|" if floor else "") + "--:|--:|--:|--:|" + "--:|" * len(extra),
    ]
    for c in r["cases"]:
        own = floors[group(c["label"])]
        rows.append(
            f"| {_label(c)} | {_ms(c['median'])} | {c['ratio']:.2f}x "
            + ((f"| {floor_ratio(c, own):.2f}x " if own else "| ") if floor else "")
            + f"| {_ms(c['user'])} | {_ms(c['sys'])} | {c['sys_us_per_file']:.1f} "
            f"| {_num(c.get('syscalls_per_file'))} |"
            + "".join(f" {fmt(c[key]) if key in c else ''} |" for key, _, fmt in extra)
        )
    rows += ["", "<details><summary>commands</summary>", ""]
    rows += [f"- {c['label']}: `{c['cmd']}`" for c in r["cases"]]
    rows += ["", "</details>", ""]
    return "\n".join(rows)


def kernel_table(r):
    """Per-file kernel cost of each case: strace -c call counts × perf trace -s µs per call
    (perf trace drops events at high rates, so its counts are not used, only its averages)."""
    if not any("perf_msec" in c for c in r["cases"]):
        return ""
    files = r["files"]
    rows = [
        "| case | sys µs/file (rusage) | syscalls/file | in-syscall µs/file (no waits) "
        "| top syscalls by kernel time: calls/file × µs/call |",
        "|---|--:|--:|--:|---|",
    ]
    for c in r["cases"]:
        cost = []
        for name, calls in c.get("strace", {}).items():
            n, ms = c.get("perf_msec", {}).get(name, (0, 0))
            if n and name not in WAITS:
                cost.append((calls * ms * 1000 / n / files, name, calls / files, ms * 1000 / n))
        cost.sort(reverse=True)
        total = sum(x[0] for x in cost)
        tops = ", ".join(f"{name} {per:.2f} × {us:.1f}" for _, name, per, us in cost[:5])
        if "strace" not in c:
            continue
        rows.append(
            f"| {_cell(c['label'])} | {c['sys_us_per_file']:.1f} | {_num(c.get('syscalls_per_file'))} "
            f"| {total:.1f} | {tops} |"
        )
    rows += ["", "Hottest functions (`perf record`, % of samples; `[k]` = kernel):", ""]
    for c in r["cases"]:
        if c.get("profile"):
            hot = ", ".join(f"{sym} {pct:.0f}%" for sym, pct in c["profile"][:6])
            rows.append(f"- {c['label']}: {hot}")
    return "\n".join(rows) + "\n"


def latest():
    """{suite: newest results document}."""
    out = {}
    for path in sorted(glob.glob(os.path.join(lib.RESULTS, "*.json"))):
        with open(path) as f:
            doc = json.load(f)
        out[doc["suite"]] = doc
    return out


def _suite(name):
    try:
        return importlib.import_module(f"suites.{name}")
    except ImportError:
        return None


def _verdict(got, ok, wrong=None):
    if wrong:
        return f"**{_cell(wrong)} copied wrong**"
    return "not measured" if got is None else "met" if ok else "**missed**"


def _wrong(r, *labels):
    """Which of the cases `labels` of set result `r` (the first of its group included)
    copied wrong, as text ("" when none)."""
    cases = r.get("cases", [])
    firsts = {group(c["label"]): c for c in reversed(cases)}
    by_label = {c["label"]: c for c in cases}
    named = [by_label.get(x) for x in labels] + [firsts.get(group(x)) for x in labels]
    return " and ".join(dict.fromkeys(c["label"] for c in named if c and c.get("wrong")))


# A LIMITS or MINIMA field: (what it measures, unit, scale of the shown number).
MEASURES = {
    "ratio": ("its time / barge's", "x", 1),
    "syscalls_per_file": ("syscalls/file", "", 1),
    "link_share": ("share of 1 Gbit/s", "%", 100),
}


def _bound_row(suite, doc, name, label, field, bound, want):
    """One row of targets_table: case `label`'s `field` on set `name` against `want`, an upper
    bound ("at most") or a lower one ("at least")."""
    r = doc["sets"].get(name, {})
    cases = {c["label"]: c for c in r.get("cases", [])}
    got = cases.get(label, {}).get(field)
    measure, unit, scale = MEASURES[field]
    ok = got is not None and (got <= want if bound == "at most" else got >= want)
    # A share to a tenth of a percent: 89.5% is no 90%.
    shown = "" if got is None else f"{got * scale:.{1 if scale > 1 else 2}f}{unit}"
    return (
        f"| {suite} | {name} | {_cell(label)} | {measure} | {bound} {want * scale:.{0 if scale > 1 else 1}f}{unit} "
        f"| {shown} | {_verdict(got, ok, _wrong(r, label))} |"
    )


def targets_table(docs):
    """Each suite's TARGETS (a peer's time / barge's, at least), LIMITS (a case's own figure,
    at most) and MINIMA (a case's own figure, at least) against the newest results."""
    rows = ["| suite | set | case | measure | target | measured | |", "|---|---|---|---|--:|--:|---|"]
    for suite, doc in sorted(docs.items()):
        mod = _suite(suite)
        for name, label, want in getattr(mod, "TARGETS", []):
            r = doc["sets"].get(name, {})
            cases = {c["label"]: c for c in r.get("cases", [])}
            got = cases.get(label, {}).get("ratio")
            verdict = _verdict(got, got is not None and got >= want, _wrong(r, label))
            rows.append(
                f"| {suite} | {name} | {_cell(label)} | its time / barge's | at least {want:g}x "
                f"| {_num(got)}{'x' if got else ''} | {verdict} |"
            )
        for bound, entries in (("at most", getattr(mod, "LIMITS", [])), ("at least", getattr(mod, "MINIMA", []))):
            for name, label, field, want in entries:
                rows.append(_bound_row(suite, doc, name, label, field, bound, want))
    return "\n".join(rows)


def floor_table(docs):
    """barge time / floor time (the floor: bare syscalls, bench/floor/) against the targets."""
    rows = ["| suite | set | barge / floor | target (at most) | |", "|---|---|--:|--:|---|"]
    for suite, doc in sorted(docs.items()):
        targets = dict(getattr(_suite(suite), "FLOOR_TARGETS", []))
        for name, r in doc["sets"].items():
            firsts = {}
            for c in r["cases"]:
                firsts.setdefault(group(c["label"]), c)
            for grp, first in firsts.items():
                floor = _floor(r, grp)
                if not floor:
                    continue
                got = floor_ratio(first, floor)
                key = grp + name if grp else name
                want = targets.get(key)
                verdict = "" if want is None else "met" if got <= want else "**missed**"
                target = "" if want is None else f"{want:.2f}x"
                rows.append(f"| {suite} | {_cell(key)} | {got:.2f}x | {target} | {verdict} |")
    return "\n".join(rows) if len(rows) > 2 else ""


def generated(docs):
    parts = [BEGIN, ""]
    if not docs:
        return "\n".join(parts + ["No results yet: run `bench/run`.", "", END])
    newest = max((s for d in docs.values() for s in d["sets"].values()), key=lambda s: s["when"])
    env = newest["env"]
    parts += [
        "## Machine (newest run)",
        "",
        f"- kernel {env['kernel']}, CPU {env['cpu']}, {env['cores']} cores, {env['mem_gib']} GiB RAM",
        "- " + "; ".join(v.strip() for v in env["tools"].values() if v),
        "",
        "## Targets",
        "",
        "Median of per-pair ratios (a case's time / plain barge's, same run) and syscalls per file",
        "(`strace -c -f`) against the targets.",
        "",
        targets_table(docs),
        "",
    ]
    floors = floor_table(docs)
    if floors:
        parts += [
            "Against the floor (median of per-pair ratios barge time / floor time, same run; the",
            "floor programs are described in each suite's section):",
            "",
            floors,
            "",
        ]
    for suite, doc in sorted(docs.items()):
        mod = _suite(suite)
        parts += [f"## {suite} ({doc['date']})", ""]
        if mod and mod.__doc__:
            parts += [mod.__doc__.strip(), ""]
        for name, r in doc["sets"].items():
            parts += ["### " + f"{suite} {name}", "", set_table(suite, name, r)]
            k = kernel_table(r)
            if k:
                parts += ["Kernel cost per file:", "", k]
    return "\n".join(parts + [END])


def render_docs():
    """Rewrites the generated part of docs/BENCHMARKS.md; returns its path."""
    text = ""
    if os.path.exists(DOC):
        with open(DOC) as f:
            text = f.read()
    body = generated(latest())
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + body + rest.split(END, 1)[1]
    else:
        text = (text or "# Benchmarks\n\n") + "\n" + body + "\n"
    with open(DOC, "w") as f:
        f.write(text)
    return DOC
