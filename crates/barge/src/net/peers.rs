//! Connections shared out by client address, so that no address can take every slot:
//! recv's handshakes ([`super::server`]), and serve's `--max-connections`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// The connections open per client address (an IPv6 client by its /64 network, which one
/// subscriber usually holds whole).
pub struct Peers {
    /// The most one address may hold.
    pub share: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

impl Peers {
    /// Each address may hold `share` connections.
    pub fn new(share: usize) -> Arc<Peers> {
        Arc::new(Peers {
            share,
            open: Mutex::default(),
        })
    }

    /// Each address may hold a quarter of `max_connections`, at least one.
    pub fn quarter_of(max_connections: u32) -> Arc<Peers> {
        Peers::new((max_connections as usize / 4).max(1))
    }

    /// A slot for one more connection from `ip`; `None` when its address holds its share.
    pub fn take(self: &Arc<Peers>, ip: IpAddr) -> Option<PeerSlot> {
        let address = match ip.to_canonical() {
            IpAddr::V6(ip) => IpAddr::V6((u128::from(ip) & u128::MAX << 64).into()),
            ip => ip,
        };
        let mut open = self.open.lock().expect("no panic while held");
        let count = open.entry(address).or_default();
        if *count == self.share {
            return None;
        }
        *count += 1;
        Some(PeerSlot {
            peers: self.clone(),
            address,
        })
    }
}

/// One connection's place in its address's share, given back when dropped.
pub struct PeerSlot {
    peers: Arc<Peers>,
    address: IpAddr,
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = self.peers.open.lock().expect("no panic while held");
        if let Some(count) = open.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.address);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_holds_at_most_its_share() {
        let peers = Peers::quarter_of(8);
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        let two: Vec<_> = (0..2)
            .map(|_| peers.take(ip("10.0.0.1")).unwrap())
            .collect();
        assert!(peers.take(ip("10.0.0.1")).is_none(), "a third of 8 / 4");
        assert!(
            peers.take(ip("::ffff:10.0.0.1")).is_none(),
            "the same, mapped"
        );
        assert!(peers.take(ip("10.0.0.2")).is_some(), "another address");
        drop(two);
        assert!(peers.take(ip("10.0.0.1")).is_some(), "given back");
        // One /64 is one address.
        let _a = peers.take(ip("2001:db8::1")).unwrap();
        let _b = peers.take(ip("2001:db8::ffff:2")).unwrap();
        assert!(peers.take(ip("2001:db8::3")).is_none());
        assert!(peers.take(ip("2001:db8:0:1::1")).is_some());
        assert_eq!(Peers::quarter_of(3).share, 1, "at least one");
    }
}
