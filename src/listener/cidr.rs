//! Address ranges (`10.0.0.0/28`, `fd00::/64`): the API server's, given with
//! `--api-server-cidrs`, whose connections count as the API server's (SPEC §9.8).

use std::{fmt, net::IpAddr, str::FromStr};

/// One address range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Whether `ip` is in the range (an IPv4 address written as IPv6 is the IPv4 one).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let (addr, prefix) = s.split_once('/').ok_or_else(|| {
            format!("{s:?} is not a CIDR: give an address and a prefix length, as 10.0.0.0/28")
        })?;
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("{s:?}: {addr:?} is not an IP address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p| *p <= max)
            .ok_or_else(|| format!("{s:?}: the prefix length must be 0 to {max}"))?;
        Ok(Cidr { addr, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_holds_its_addresses_and_no_other() {
        let net: Cidr = "10.0.0.0/28".parse().unwrap();
        assert!(net.contains("10.0.0.15".parse().unwrap()));
        assert!(!net.contains("10.0.0.16".parse().unwrap()));
        assert!(net.contains("::ffff:10.0.0.1".parse().unwrap()));
        assert!(!net.contains("fd00::1".parse().unwrap()));
        let one: Cidr = "127.0.0.1/32".parse().unwrap();
        assert!(one.contains("127.0.0.1".parse().unwrap()));
        assert!(!one.contains("127.0.0.2".parse().unwrap()));
        let v6: Cidr = "fd00::/64".parse().unwrap();
        assert!(v6.contains("fd00::abcd".parse().unwrap()));
        assert!(!v6.contains("fd01::1".parse().unwrap()));
        for bad in ["10.0.0.0", "10.0.0.0/33", "x/8", "fd00::/129"] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }
}
