//! The system's user and group databases, read whole through libc (NSS with glibc,
//! /etc/passwd and /etc/group with musl), so that lookups need no file later (a confined
//! lander cannot open /etc).

use std::ffi::CStr;
use std::sync::Mutex;

/// `getpwent` and `getgrent` keep one cursor per process.
static DATABASE: Mutex<()> = Mutex::new(());

/// Every (name, uid) the user database lists, in its order.
pub(crate) fn users() -> Vec<(Vec<u8>, u32)> {
    // SAFETY: `getpwent` returns null or a valid record whose `pw_name` is a C string.
    read_all(libc::setpwent, libc::getpwent, libc::endpwent, |e| unsafe {
        ((*e).pw_name, (*e).pw_uid)
    })
}

/// Every (name, gid) the group database lists, in its order.
pub(crate) fn groups() -> Vec<(Vec<u8>, u32)> {
    // SAFETY: as in `users`, for `getgrent` and `gr_name`.
    read_all(libc::setgrent, libc::getgrent, libc::endgrent, |e| unsafe {
        ((*e).gr_name, (*e).gr_gid)
    })
}

/// Every (name, id) of one database, read with its `set`, `get` and `end` calls.
fn read_all<T>(
    set: unsafe extern "C" fn(),
    get: unsafe extern "C" fn() -> *mut T,
    end: unsafe extern "C" fn(),
    fields: impl Fn(*const T) -> (*const libc::c_char, u32),
) -> Vec<(Vec<u8>, u32)> {
    let _one = DATABASE.lock().unwrap_or_else(|e| e.into_inner());
    let mut all = Vec::new();
    // SAFETY: the lock keeps the cursor to this thread; each record is copied out before
    // the next call reuses its storage; the name is a NUL-terminated string.
    unsafe {
        set();
        loop {
            let entry = get();
            if entry.is_null() {
                break;
            }
            let (name, id) = fields(entry);
            all.push((CStr::from_ptr(name).to_bytes().to_vec(), id));
        }
        end();
    }
    all
}
