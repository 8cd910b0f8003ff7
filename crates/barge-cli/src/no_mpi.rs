//! `--mpi` in a build without the `mpi` feature: the flags are the same in both builds
//! (one help, one README flag table), and here each says which binary runs it.

use std::path::Path;

use anyhow::{bail, Result};
use barge::interrupt::Cancel;
use barge::unpack::Unpack;

use crate::archive::PackArgs;
use crate::cp::CpArgs;
use crate::report::Exit;
use crate::OutputArgs;

/// The error every `--mpi` gives here.
fn without_mpi() -> Result<Exit> {
    bail!("this barge is built without MPI: run target/barge-mpi (scripts/build --mpi)")
}

/// `cp --mpi`.
pub fn cp(_: &CpArgs, _: &Cancel) -> Result<Exit> {
    without_mpi()
}

/// `pack --mpi`.
pub fn pack(_: &PackArgs, _: &Cancel) -> Result<Exit> {
    without_mpi()
}

/// `unpack --mpi`.
pub fn unpack(_: Option<&Path>, _: &Path, _: &Unpack, _: OutputArgs) -> Result<Exit> {
    without_mpi()
}
