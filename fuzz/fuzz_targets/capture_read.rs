//! Fuzz the capture readers: arbitrary bytes as a pcap/pcapng file, every record decoded,
//! matched and printed. Must never panic; errors must point inside the file; the
//! streaming reader must give the same records and error as the in-memory one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pcielab_capture::decode::{decode, Decoded};
use pcielab_capture::transactions::Matcher;
use pcielab_capture::{Reader, StreamReader};

fuzz_target!(|data: &[u8]| {
    let mut r = match Reader::new(data) {
        Ok(r) => r,
        Err(e) => {
            assert!(e.offset <= data.len() as u64);
            let _ = e.to_string();
            return;
        }
    };
    // The records (frame, interface, time, payload) and the error of the stream reader,
    // checked against the in-memory reader's below.
    let mut streamed = Vec::new();
    let mut stream_err = None;
    if let Ok(mut s) = StreamReader::new(data) {
        while let Some(x) = s.next_record() {
            match x {
                Ok((rec, ifs)) => streamed.push((
                    rec.frame,
                    ifs[rec.interface].name.clone(),
                    rec.time_ps,
                    format!("{:?}", rec.payload),
                )),
                Err(e) => stream_err = Some(e),
            }
        }
    } else {
        panic!("the stream reader refused a header the in-memory reader took");
    }
    let mut seen = Vec::new();
    let mut mem_err = None;
    let mut m = Matcher::new();
    while let Some(x) = r.next_record() {
        match x {
            Ok(rec) => {
                let name = r.interfaces()[rec.interface].name.clone();
                seen.push((rec.frame, name.clone(), rec.time_ps, format!("{:?}", rec.payload)));
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
                mem_err = Some(e);
            }
        }
    }
    let _ = m.outstanding().count();
    assert_eq!(seen, streamed);
    assert_eq!(mem_err, stream_err);
});
