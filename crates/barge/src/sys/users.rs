//! The system's user and group databases, read whole through libc (NSS with glibc,
//! /etc/passwd and /etc/group with musl), so that lookups need no file later (a confined
//! lander cannot open /etc).

use std::ffi::CStr;
use std::sync::Mutex;

/// `getpwent` and `getgrent` keep one cursor per process.
static DATABASE: Mutex<()> = Mutex::new(());

/// Every (name, uid) the user database lists, in its order.
pub(crate) fn users() -> Vec<(Vec<u8>, u32)> {
    let _one = DATABASE.lock().unwrap_or_else(|e| e.into_inner());
    let mut users = Vec::new();
    // SAFETY: the lock keeps the cursor to this thread; each record is copied out before
    // the next call reuses its storage; `pw_name` is a NUL-terminated string.
    unsafe {
        libc::setpwent();
        loop {
            let entry = libc::getpwent();
            if entry.is_null() {
                break;
            }
            let name = CStr::from_ptr((*entry).pw_name).to_bytes().to_vec();
            users.push((name, (*entry).pw_uid));
        }
        libc::endpwent();
    }
    users
}

/// Every (name, gid) the group database lists, in its order.
pub(crate) fn groups() -> Vec<(Vec<u8>, u32)> {
    let _one = DATABASE.lock().unwrap_or_else(|e| e.into_inner());
    let mut groups = Vec::new();
    // SAFETY: as in `users`.
    unsafe {
        libc::setgrent();
        loop {
            let entry = libc::getgrent();
            if entry.is_null() {
                break;
            }
            let name = CStr::from_ptr((*entry).gr_name).to_bytes().to_vec();
            groups.push((name, (*entry).gr_gid));
        }
        libc::endgrent();
    }
    groups
}
