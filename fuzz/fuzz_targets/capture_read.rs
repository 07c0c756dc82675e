//! Fuzz the capture reader: arbitrary bytes as a pcap/pcapng file, every record decoded,
//! matched and printed. Must never panic; errors must point inside the file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pcielab_capture::decode::{decode, Decoded};
use pcielab_capture::transactions::Matcher;
use pcielab_capture::Reader;

fuzz_target!(|data: &[u8]| {
    let mut r = match Reader::new(data) {
        Ok(r) => r,
        Err(e) => {
            assert!(e.offset <= data.len() as u64);
            let _ = e.to_string();
            return;
        }
    };
    let mut m = Matcher::new();
    while let Some(x) = r.next_record() {
        match x {
            Ok(rec) => {
                let name = r.interfaces()[rec.interface].name.clone();
                let d = decode(&rec);
                let _ = d.kind_name();
                if let Some(tlp) = d.tlp() {
                    let _ = m.observe(rec.frame, &name, rec.time_ps, &tlp);
                    let _ = tlp.to_string();
                }
                if let Decoded::Dllp { dllp, .. } = d {
                    let _ = dllp.to_string();
                }
            }
            Err(e) => {
                assert!(e.offset <= data.len() as u64);
                let _ = e.to_string();
            }
        }
    }
    let _ = m.outstanding().count();
});
