//! The documentation site's command-line reference is the binary's own:
//! docs/reference/cli.md must equal what `creek reference` prints now.

#[test]
fn the_cli_reference_in_the_docs_is_current() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_creek"))
        .arg("reference")
        .output()
        .expect("creek reference");
    assert!(out.status.success(), "{out:?}");
    let now = String::from_utf8(out.stdout).expect("UTF-8");
    assert!(now.contains("### `creek serve`"), "{now}");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/reference/cli.md");
    let committed = std::fs::read_to_string(&path).expect("docs/reference/cli.md");
    assert!(
        committed == now,
        "docs/reference/cli.md is not what `creek reference` prints: regenerate it with \
         `cargo run -p creek -- reference > docs/reference/cli.md`"
    );
}
