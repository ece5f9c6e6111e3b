//! The far tier's protocol against the real server: hits, `missing`, background
//! warming, bit-identical outputs, and a malformed request that does not stop it.

use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use tinyk3::far::{Request, Response, encode_request, read_compute_response, read_warm_response};

use crate::common::{start_server, tiny_model};

fn connect(addr: &str) -> (TcpStream, BufReader<TcpStream>) {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let r = BufReader::new(s.try_clone().unwrap());
    (s, r)
}

fn compute(
    w: &mut TcpStream,
    r: &mut BufReader<TcpStream>,
    x: &[f32],
    experts: &[u32],
) -> Vec<Option<Vec<f32>>> {
    let req = Request::Compute {
        layer: 1,
        d: 32,
        vecs: vec![x.to_vec()],
        items: experts.iter().map(|&e| (0, e)).collect(),
    };
    w.write_all(&encode_request(&req)).unwrap();
    match read_compute_response(r, experts.len(), 32).unwrap() {
        Response::Compute(outs) => outs,
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn round_trip_missing_and_malformed() {
    let (_tmp, model) = tiny_model();
    let server = start_server(&model, 4, &[]);
    let (mut w, mut r) = connect(&server.addr);
    w.write_all(&encode_request(&Request::Warm {
        experts: vec![(1, 3)],
    }))
    .unwrap();
    assert_eq!(
        read_warm_response(&mut r).unwrap(),
        Response::Warm { warm: 1 }
    );

    let x: Vec<f32> = (0..32).map(|i| (i as f32 * 0.3).cos()).collect();
    let outs = compute(&mut w, &mut r, &x, &[3, 5]);
    let got = outs[0].clone().expect("warm expert is served");
    assert!(
        outs[1].is_none(),
        "a cold expert comes back missing at once"
    );

    // Bit-identical to the engine's kernel on the checkpoint's weights.
    let m = tinyk3::manifest::Manifest::load(&model).unwrap();
    let mut weights = vec![0f32; (m.experts.stride / 4) as usize];
    tinyk3::checkpoint::expert_weights(&m.shape, m.seed, 1, 3, &mut weights);
    let want = tinyk3::math::gated_mlp(&weights, 32, 64, &[&x]);
    assert_eq!(got, want[0]);

    // The missing expert is warmed in the background for later requests.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if compute(&mut w, &mut r, &x, &[5])[0].is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "expert 5 never warmed");
        std::thread::sleep(Duration::from_millis(20));
    }

    // Garbage gets an error frame and a closed connection; the server keeps serving.
    let (mut bad, mut bad_r) = connect(&server.addr);
    bad.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    match read_warm_response(&mut bad_r).unwrap() {
        Response::Error(msg) => assert!(msg.contains("magic"), "{msg}"),
        other => panic!("expected an error frame, got {other:?}"),
    }
    // An out-of-range expert is refused the same way.
    let (mut bad2, mut bad2_r) = connect(&server.addr);
    let req = Request::Compute {
        layer: 1,
        d: 32,
        vecs: vec![x.clone()],
        items: vec![(0, 99)],
    };
    bad2.write_all(&encode_request(&req)).unwrap();
    assert!(matches!(
        read_compute_response(&mut bad2_r, 1, 32).unwrap(),
        Response::Error(_)
    ));

    let (mut w2, mut r2) = connect(&server.addr);
    assert_eq!(
        compute(&mut w2, &mut r2, &x, &[3])[0].as_ref(),
        Some(&want[0])
    );
    assert_eq!(
        compute(&mut w, &mut r, &x, &[3])[0].as_ref(),
        Some(&want[0]),
        "old connection still served"
    );
}
