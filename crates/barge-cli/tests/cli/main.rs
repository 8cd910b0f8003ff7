//! Integration tests of the `barge` command, run against the real binary on real files.

mod common;
mod confine;
mod conventions;
mod cp;
mod du;
mod engines;
mod fidelity;
mod hostile;
mod indexed;
mod limits;
mod list;
// Built only with the `mpi` feature (needs MPI: `scripts/deps --mpi`); scripts/test runs them.
#[cfg(feature = "mpi")]
mod mpi;
mod net;
mod offset;
mod pack;
mod pack_inputs;
mod paths;
mod redteam;
mod restore;
mod roundtrip;
mod sandbox;
mod select;
mod serve;
mod setid;
mod syscalls;
mod v2;
mod vectors;
mod verify;
