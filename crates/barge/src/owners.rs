//! Owner names: what a pack records beside the ids, and the ids an unpack gives them back
//! (GNU tar's rule: the id the name has on this system where it has one, else the id
//! recorded; `--numeric-owner` uses the recorded ids). Read once, before any sandbox.

use std::collections::HashMap;

use crate::sys::users;

/// Users and groups by id and by name; where the database lists an id or a name twice,
/// its first entry counts (as `getpwuid` and `getpwnam` find it).
#[derive(Debug, Default)]
pub struct Owners {
    user_names: HashMap<u32, Vec<u8>>,
    user_ids: HashMap<Vec<u8>, u32>,
    group_names: HashMap<u32, Vec<u8>>,
    group_ids: HashMap<Vec<u8>, u32>,
}

impl Owners {
    /// The users and groups of this system.
    pub fn system() -> Owners {
        Owners::from_lists(users::users(), users::groups())
    }

    /// Users and groups from (name, id) lists.
    pub fn from_lists(users: Vec<(Vec<u8>, u32)>, groups: Vec<(Vec<u8>, u32)>) -> Owners {
        let (user_names, user_ids) = both_ways(users);
        let (group_names, group_ids) = both_ways(groups);
        Owners {
            user_names,
            user_ids,
            group_names,
            group_ids,
        }
    }

    /// The name of user `uid`, if it has one.
    pub fn user_name(&self, uid: u32) -> Option<&[u8]> {
        self.user_names.get(&uid).map(Vec::as_slice)
    }

    /// The name of group `gid`, if it has one.
    pub fn group_name(&self, gid: u32) -> Option<&[u8]> {
        self.group_names.get(&gid).map(Vec::as_slice)
    }

    /// The uid to give a file recorded with user `name` and `uid`.
    pub fn uid(&self, name: &[u8], uid: u32) -> u32 {
        self.user_ids.get(name).copied().unwrap_or(uid)
    }

    /// The gid to give a file recorded with group `name` and `gid`.
    pub fn gid(&self, name: &[u8], gid: u32) -> u32 {
        self.group_ids.get(name).copied().unwrap_or(gid)
    }
}

/// Id -> name and name -> id, the first of each kept.
fn both_ways(list: Vec<(Vec<u8>, u32)>) -> (HashMap<u32, Vec<u8>>, HashMap<Vec<u8>, u32>) {
    let mut names = HashMap::with_capacity(list.len());
    let mut ids = HashMap::with_capacity(list.len());
    for (name, id) in list {
        names.entry(id).or_insert_with(|| name.clone());
        ids.entry(name).or_insert(id);
    }
    (names, ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_the_ids_here_and_unknown_names_keep_the_recorded_id() {
        let owners = Owners::from_lists(
            vec![
                (b"root".to_vec(), 0),
                (b"toor".to_vec(), 0),
                (b"ann".to_vec(), 1000),
            ],
            vec![(b"wheel".to_vec(), 10)],
        );
        assert_eq!(owners.uid(b"root", 12345), 0);
        assert_eq!(owners.uid(b"nobody-here", 12345), 12345);
        assert_eq!(owners.user_name(0), Some(&b"root"[..]));
        assert_eq!(owners.user_name(7), None);
        assert_eq!(owners.gid(b"wheel", 3), 10);
        assert_eq!(owners.gid(b"ann", 3), 3);
        assert_eq!(owners.group_name(10), Some(&b"wheel"[..]));
    }

    #[test]
    fn this_system_lists_root_as_user_and_group_zero() {
        let owners = Owners::system();
        assert_eq!(owners.user_name(0), Some(&b"root"[..]));
        assert_eq!(owners.uid(b"root", 99), 0);
        assert_eq!(owners.gid(b"root", 99), 0);
    }
}
