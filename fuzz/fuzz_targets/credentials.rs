//! What a caller's credentials go through: any bytes as a bearer token's
//! text (`creek_server::auth::Token::parse`, from an `authorization`
//! header or a native `Hello`), as a client certificate's DER
//! (`common_name`, the small walk that names a certificate's user), and as
//! the replicated auth records the rules are compiled from
//! (`TokenRecord::decode`, `Grant::parse`, `Rules::from_records`). Never
//! panics; a parsed token prints back to itself; a decoded token record
//! encodes back to a record that decodes to it.
#![no_main]

use creek_procs::auth::{
    Grant, Rules, TokenRecord, ENABLED_KEY, ROLE_PREFIX, TOKEN_PREFIX, USER_PREFIX,
};
use creek_server::auth::{common_name, Token};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(token) = Token::parse(&text) {
        let again = Token::parse(&token.to_string()).expect("a printed token parses");
        assert!(again == token);
    }
    let _ = Grant::parse(&text);
    let _ = common_name(data);
    if let Ok(record) = TokenRecord::decode(data) {
        assert_eq!(TokenRecord::decode(&record.encode()), Ok(record));
    }
    // Records: pieces separated by 0xff, taken in pairs; a key's first
    // byte picks the kind of record it is.
    let pieces: Vec<&[u8]> = data.split(|b| *b == 0xff).collect();
    let records: Vec<(Vec<u8>, &[u8])> = pieces
        .chunks_exact(2)
        .map(|pair| {
            let (kind, name) = pair[0].split_first().unwrap_or((&0, &[]));
            let key = match kind % 4 {
                0 => [USER_PREFIX, name].concat(),
                1 => [ROLE_PREFIX, name].concat(),
                2 => [TOKEN_PREFIX, name].concat(),
                _ => ENABLED_KEY.to_vec(),
            };
            (key, pair[1])
        })
        .collect();
    let _ = Rules::from_records(records.iter().map(|(k, v)| (k.as_slice(), *v)));
});
