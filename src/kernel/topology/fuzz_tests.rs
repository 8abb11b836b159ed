//! Property-based fuzz tests of sysfs value parsing: the value parsers alone (GIDs, GUIDs,
//! `<num>: <text>` states, link layer, GID types, PCIe speeds, dev numbers), and every reader
//! over a fixture tree whose attribute files are overwritten with arbitrary values. Case
//! counts and the deep mode: docs/testing.md, "Fuzzing".

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use proptest::test_runner::TestRunner;

use super::fixtures::SysfsFixture;
use super::pci::parse_gts;
use super::*;
use crate::testutil::fuzz;

/// Values sysfs attributes hold, near misses of them, and arbitrary text.
fn sysfs_value() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "4: ACTIVE", "1: DOWN", "ACTIVE", "4:ACTIVE", "-1: X", "4294967296: X", ": ",
            "InfiniBand", "Ethernet", "Unknown", "IB/RoCE v1", "RoCE v2",
            "fe80:0000:0000:0000:0e42:a1ff:fe3b:0000", "0000:0000:0000:0000:0000:ffff:0a00:0005",
            "fe80::1", "fe80:0000:0000:0000:0e42:a1ff:fe3b", "+e80:0000:0000:0000:0e42:a1ff:fe3b:0000",
            "0c42:a103:003b:0000", "+c42:a103:003b:0000", "0c42:a103:003b", "231:192", "231:",
            ":192", "4294967296:0", "8.0 GT/s PCIe", "16.0 GT/s", "2.5 GT/s", "Unknown speed",
            "4294967295 GT/s", "4294968 GT/s PCIe", "8.123456789 GT/s", ". GT/s", "8. GT/s",
            "0", "1", "4294967295", "4294967296", "-1", "18446744073709551615", "0x0", "",
            "100 Gb/sec (4X EDR)", "ens1f0np0", "mlx5_0",
        ])
        .prop_map(str::to_string),
        2 => fuzz::text(),
        1 => any::<u32>().prop_map(|n| n.to_string()),
        1 => any::<u32>().prop_map(|n| format!("{n} GT/s")),
    ]
}

proptest! {
    #![proptest_config(fuzz::config(3000))]

    /// Each value parser takes any text; what it accepts prints back as sysfs prints it.
    #[test]
    fn value_parsers_never_panic(s in sysfs_value()) {
        if let Ok(g) = s.parse::<Guid>() {
            prop_assert_eq!(g.to_string(), s.to_ascii_lowercase());
        }
        if let Ok(gid) = parse_gid(&s) {
            let printed: Vec<String> = gid.segments().iter().map(|x| format!("{x:04x}")).collect();
            prop_assert_eq!(printed.join(":"), s.to_ascii_lowercase());
        }
        match parse_devnum(&s) {
            Ok((a, b)) => prop_assert!(s.contains(':') && a.to_string().len() + b.to_string().len() < s.len()),
            Err(m) => {
                let quoted = format!("{s:?}");
                prop_assert!(m.contains(&quoted), "{}", m);
            }
        }
        if let Ok(st) = s.parse::<NumberedState>() {
            prop_assert!(s.ends_with(&st.text));
        }
        let _ = (LinkLayer::parse(&s), GidType::parse(&s).to_string());
        let link = PcieLink::parse(&s, &s);
        prop_assert_eq!(link.width, s.trim().parse().ok().filter(|w| *w > 0));
    }

    /// Well-formed values read back exactly.
    #[test]
    fn well_formed_values_round_trip(v in any::<u64>(), a in any::<u32>(), b in any::<u32>(), text in "[ -~]{0,12}", gid in any::<[u16; 8]>()) {
        prop_assert_eq!(Guid(v).to_string().parse::<Guid>(), Ok(Guid(v)));
        prop_assert_eq!(parse_devnum(&format!("{a}:{b}")), Ok((a, b)));
        let st = NumberedState { num: a, text };
        prop_assert_eq!(st.to_string().parse::<NumberedState>(), Ok(st));
        let printed: Vec<String> = gid.iter().map(|x| format!("{x:04x}")).collect();
        prop_assert_eq!(parse_gid(&printed.join(":")).map(|g| g.segments()), Ok(gid));
    }

    /// PCIe speeds: `<n>[.<d>] GT/s` in MT/s, or unknown; never a panic or a wrapped value.
    #[test]
    fn pcie_speed(int in any::<u32>(), frac in "[0-9]{0,4}", suffix in prop::sample::select(vec!["", " PCIe"])) {
        let text = if frac.is_empty() { format!("{int} GT/s{suffix}") } else { format!("{int}.{frac} GT/s{suffix}") };
        let digits: Vec<u32> = frac.chars().map(|c| c.to_digit(10).unwrap()).collect();
        let expected = u64::from(int) * 1000
            + digits.iter().zip([100u64, 10, 1]).map(|(d, s)| u64::from(*d) * s).sum::<u64>();
        match parse_gts(&text) {
            Some(mts) => prop_assert_eq!(u64::from(mts), expected),
            None => prop_assert!(expected > u64::from(u32::MAX), "{} is unknown", text),
        }
    }
}

/// Every regular file of the tree, with its content.
fn attribute_files(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file() {
                let content = fs::read(&path).unwrap();
                out.push((path, content));
            }
        }
    }
    out.sort();
    out
}

/// A reader's failure must be an I/O error; a value it cannot parse is named by its file,
/// which can only be one of those the case overwrote.
fn check_io(e: &io::Error, edited: &[String]) -> Result<(), TestCaseError> {
    let text = e.to_string();
    prop_assert!(!text.is_empty());
    if e.kind() == io::ErrorKind::InvalidData {
        prop_assert!(
            edited.iter().any(|f| text.contains(f.as_str())),
            "{} (edited {:?})",
            text,
            edited
        );
    }
    Ok(())
}

fn read_everything(
    sys: &crate::kernel::sysfs::SysRoot,
    edited: &[String],
) -> Result<(), TestCaseError> {
    let rdma = RdmaSysfs::new(sys);
    let ok_or = |r: io::Result<()>| match r {
        Ok(()) => Ok(()),
        Err(e) => check_io(&e, edited),
    };
    ok_or(rdma.devices().map(|devs| {
        for d in devs {
            let _ = (d.uverbs(), d.netdevs(), d.pci_bdf());
            for p in &d.ports {
                let _ = (p.is_active(), p.gid_ndevs());
                let _ = p.find_gid("10.0.0.5".parse().unwrap(), "ens1f0np0");
            }
        }
    }))?;
    for name in sys.list_dir("class/net").unwrap_or_default() {
        ok_or(rdma.netdev(&name).map(drop))?;
        ok_or(rdma.ib_ports_for_netdev(&name).map(drop))?;
    }
    for name in rdma.device_names().unwrap_or_default() {
        for port in 0..3 {
            match rdma.gid_table(&name, port) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => check_io(&e, edited)?,
            }
        }
        match rdma.netdevs_of_ib_device(&name) {
            Ok(_) => {}
            Err(e) => check_io(&e, edited)?,
        }
    }
    ok_or(rdma.char_devices().map(drop))?;
    ok_or(rdma.rdma_cm().map(drop))?;
    for bdf in sys.list_dir("bus/pci/devices").unwrap_or_default() {
        ok_or(rdma.pci_function(&bdf).map(|f| {
            if let Some(f) = f {
                let _ = f.link_degraded();
            }
        }))?;
    }
    Ok(())
}

/// Every reader over the fixture presets with up to three attribute files overwritten with
/// arbitrary values; the tree is built once and restored after each case.
#[test]
fn sysfs_tree_readers_never_panic() {
    let fx = SysfsFixture::all().unwrap();
    fx.add_rdma_cm().unwrap();
    let files = attribute_files(fx.path());
    assert!(files.len() > 100, "the presets should give many attributes");
    let mut runner = TestRunner::new(fuzz::config(400));
    let edits = prop::collection::vec((any::<prop::sample::Index>(), sysfs_value()), 1..4);
    runner
        .run(&edits, |edits| {
            for (idx, value) in &edits {
                let (path, _) = idx.get(&files);
                fs::write(path, format!("{value}\n")).unwrap();
            }
            let edited: Vec<String> = edits
                .iter()
                .map(|(idx, _)| {
                    let (path, _) = idx.get(&files);
                    // Readers name a file by the path they opened (`class/...` through the
                    // class links); its last components are the same either way.
                    let parts: Vec<_> = path.strip_prefix(fx.path()).unwrap().iter().collect();
                    let tail = &parts[parts.len().saturating_sub(3)..];
                    tail.iter().collect::<PathBuf>().display().to_string()
                })
                .collect();
            let outcome = read_everything(fx.root(), &edited);
            for (idx, _) in &edits {
                let (path, original) = idx.get(&files);
                fs::write(path, original).unwrap();
            }
            outcome
        })
        .unwrap();
}

// Inputs the properties above found, kept as plain tests.

/// `parse_gts` multiplied a u32 by 1000 unchecked: a debug build panicked on a speed above
/// 4294967 GT/s and a release build wrapped it into a small, wrong MT/s.
#[test]
fn regression_pcie_speed_beyond_u32_mts_is_unknown() {
    assert_eq!(parse_gts("4294968 GT/s"), None);
    assert_eq!(PcieLink::parse("4294968 GT/s PCIe", "8").mts, None);
    assert_eq!(parse_gts("4294967 GT/s"), Some(4_294_967_000));
    assert_eq!(parse_gts("4294967.295 GT/s"), Some(u32::MAX));
}

/// A GUID group with a sign (`+c42`) was accepted, since `from_str_radix` takes one.
#[test]
fn regression_guid_groups_are_hex_digits_only() {
    assert!("+c42:a103:003b:0000".parse::<Guid>().is_err());
    assert_eq!(
        "0C42:a103:003b:0000".parse::<Guid>(),
        Ok(Guid(0x0c42_a103_003b_0000))
    );
}

/// A netdev whose `dev_port` reads u32::MAX overflowed `dev_port + 1` (a debug-build panic)
/// while its ib ports were looked up.
#[test]
fn regression_dev_port_u32_max_names_no_port() {
    let fx = SysfsFixture::all().unwrap();
    let dev_port = fs::canonicalize(fx.path().join("class/net/ens1f0np0"))
        .unwrap()
        .join("dev_port");
    fs::write(&dev_port, "4294967295\n").unwrap();
    let rdma = RdmaSysfs::new(fx.root());
    let ports = rdma.ib_ports_of_own_device("ens1f0np0").unwrap();
    assert!(
        ports.iter().all(|p| p.via != NetdevLink::Device),
        "{ports:?}"
    );
    for dev in rdma.devices().unwrap() {
        for port in &dev.ports {
            assert!(!port.netdevs.iter().any(|n| n == "ens1f0np0"), "{port:?}");
        }
    }
}
