//! gRPC request conversion (`creek-server`): any bytes decoded as an
//! `InvokeRequest` (as tonic's prost codec does) and turned into the node's
//! request. Never panics; what is accepted is within the size limit and
//! its arguments decode back to the request's values.
#![no_main]

use creek_proto::pb;
use libfuzzer_sys::fuzz_target;
use prost::Message;

const MAX_REQUEST_BYTES: usize = 64 << 10;

fuzz_target!(|data: &[u8]| {
    let Ok(req) = pb::InvokeRequest::decode(data) else {
        return;
    };
    let Ok(request) = creek_server::request::to_request(&req, MAX_REQUEST_BYTES) else {
        return;
    };
    let call = &request.call;
    assert!(call.args.len() + call.name.len() <= MAX_REQUEST_BYTES);
    assert_eq!(&*call.name, req.procedure.as_str());
    let args = match creek_types::value::decode_args(&call.args) {
        Ok(args) => args,
        Err(e) => panic!("accepted arguments do not decode: {e}"),
    };
    let wire: Vec<pb::Value> = args.iter().map(creek_proto::to_wire).collect();
    assert_eq!(wire, req.args);
    let views = request.views;
    assert!(views.tentative || views.snapshot || views.final_view);
});
