//! `creek user` and `creek role`: the users, tokens and roles of a cluster
//! with `[auth] enabled` (docs/security.md, "Users, roles and tokens").
//!
//! A token is made here, on the caller's machine: its secret is printed
//! once and only its SHA-256 is sent, in a strong op, so no replica ever
//! holds the secret and applying the op is the same on every replica.

use bytes::Bytes;
use creek_client::Levels;
use creek_server::auth::{self, Token};
use creek_types::value::Value;

use crate::cli::{self, exit, Endpoints, Failure, Format, Output};

/// Arguments of `creek user`.
#[derive(clap::Args, Debug)]
pub struct UserArgs {
    #[command(flatten)]
    endpoints: Endpoints,
    #[command(flatten)]
    output: Output,
    #[command(subcommand)]
    command: UserCommand,
}

#[derive(clap::Subcommand, Debug)]
enum UserCommand {
    /// Add a user with one or more roles and print its first token (shown
    /// once: keep it).
    Add {
        /// Its name: letters, digits and `_` (a client certificate's
        /// common name, for certificate authentication).
        name: String,
        /// A role: admin, readwrite, readonly, or one made with `creek
        /// role set`. Repeat for several.
        #[arg(long = "role", required = true)]
        roles: Vec<String>,
    },
    /// Remove a user and revoke all its tokens.
    Remove {
        /// The user.
        name: String,
    },
    /// Every user with its roles and token ids.
    List,
    /// Make another token for a user and print it (shown once).
    Token {
        /// The user.
        name: String,
        /// How long the token authenticates, e.g. 90s, 30m, 12h, 7d; it
        /// never expires without. Refresh by making a new token before it
        /// expires (and revoking the old one).
        #[arg(long, value_parser = parse_ttl)]
        ttl: Option<u64>,
    },
    /// Revoke a token, given whole or by its id (the 16 hex digits after
    /// `creek_`).
    Revoke {
        /// The token or its id.
        #[arg(value_name = "TOKEN")]
        which: String,
    },
}

/// Arguments of `creek role`.
#[derive(clap::Args, Debug)]
pub struct RoleArgs {
    #[command(flatten)]
    endpoints: Endpoints,
    #[command(flatten)]
    output: Output,
    #[command(subcommand)]
    command: RoleCommand,
}

#[derive(clap::Subcommand, Debug)]
enum RoleCommand {
    /// Define (or redefine) a role by its grants, each
    /// RIGHT:keyspace:NAME or RIGHT:proc:NAME with RIGHT one of read,
    /// write, admin; NAME `default` is the keys of the kv.* and collection
    /// built-ins, `*` everything, and a procedure name may end with `*`.
    Set {
        /// Its name.
        name: String,
        /// Its grants, e.g. write:keyspace:accounts read:proc:report_*.
        #[arg(required = true)]
        grants: Vec<String>,
    },
    /// Every role with its grants (the built-in ones first).
    List,
}

/// Arguments of `creek auth`.
#[derive(clap::Args, Debug)]
pub struct AuthArgs {
    #[command(flatten)]
    endpoints: Endpoints,
    #[command(flatten)]
    output: Output,
    #[command(subcommand)]
    command: AuthCommand,
}

#[derive(clap::Subcommand, Debug)]
enum AuthCommand {
    /// Make every replica of a running cluster check users from now on (a
    /// strong op): calls without a token or a client certificate naming a
    /// user are refused at every replica. Prints the new root token (shown
    /// once) and the `[auth]` lines each replica's configuration needs
    /// before its next start.
    Enable {
        /// The SHA-256 (hex) of a root token made beforehand (`creek certs`
        /// and `creek dev --secure` make one); without it, a new root token
        /// is made and printed.
        #[arg(long, value_name = "HEX")]
        root_token_sha256: Option<String>,
    },
}

/// Run `creek auth`.
pub fn run_auth(args: &AuthArgs) -> Result<(), Failure> {
    let out = args.output.output;
    let AuthCommand::Enable { root_token_sha256 } = &args.command;
    let (token, hash) = match root_token_sha256 {
        Some(hex) => {
            let hash = auth::from_hex::<32>(hex.trim()).ok_or_else(|| {
                Failure::new(
                    exit::FAILED,
                    format!("--root-token-sha256 must be 64 hex digits, not {hex:?}"),
                )
            })?;
            (None, hash)
        }
        None => {
            let token = Token::generate(true).map_err(|e| Failure::new(exit::FAILED, e))?;
            let hash = token.hash();
            (Some(token), hash)
        }
    };
    cli::runtime()?.block_on(async {
        let hash_arg = Value::Bytes(Bytes::copy_from_slice(&hash));
        let now = call(
            &args.endpoints,
            "auth.enable",
            vec![hash_arg],
            Levels::Strong,
        )
        .await?;
        let hex = auth::to_hex(&hash);
        match (out, &token) {
            (Format::Json, _) => out!(
                "{}",
                serde_json::json!({
                    "switched_now": now == Value::Bool(true),
                    "root_token": token.as_ref().map(Token::to_string),
                    "root_token_sha256": hex,
                })
            ),
            (Format::Value, Some(token)) => out!("{token}"),
            (Format::Value, None) => out!("{hex}"),
            (Format::Table, _) => {
                if let Some(token) = &token {
                    out!("{token}");
                    eprintln!("the root token: shown only now; give it to clients as CREEK_TOKEN");
                }
                eprintln!(
                    "{}; before each replica's next start, add to its configuration:\n\n\
                     [auth]\nenabled = true\nroot_token_sha256 = \"{hex}\"\n\n(a replica \
                     whose [auth] disagrees with the cluster's refuses to start)",
                    if now == Value::Bool(true) {
                        "the cluster checks users from now on"
                    } else {
                        "the cluster already checked users with this root token"
                    }
                );
            }
        }
        Ok(())
    })
}

fn bytes(s: &str) -> Value {
    Value::Bytes(Bytes::copy_from_slice(s.as_bytes()))
}

/// Run `procedure` at `levels`; an abort is a failure with its message.
async fn call(
    endpoints: &Endpoints,
    procedure: &str,
    args: Vec<Value>,
    levels: Levels,
) -> Result<Value, Failure> {
    let addrs = endpoints.list();
    let client = cli::connect(endpoints, &addrs).await?;
    cli::call_closing(&client, &addrs, procedure, args, levels)
        .await?
        .map_err(|abort| Failure::new(exit::ABORTED, abort))
}

/// A token's lifetime in seconds: a positive number with a unit, s, m, h
/// or d.
fn parse_ttl(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let bad =
        || format!("a TTL is a whole number with a unit s, m, h or d (e.g. 12h), not {text:?}");
    let unit = text.chars().last().ok_or_else(bad)?;
    let scale = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3_600,
        'd' => 86_400,
        _ => return Err(bad()),
    };
    let n: u64 = text[..text.len() - 1].parse().map_err(|_| bad())?;
    match n.checked_mul(scale) {
        Some(0) => Err(format!("a TTL must be positive, not {text:?}")),
        Some(secs) if secs <= TTL_MAX_S => Ok(secs),
        _ => Err(format!(
            "a TTL is at most {} days, not {text:?}",
            TTL_MAX_S / 86_400
        )),
    }
}

/// The longest TTL `creek user token --ttl` takes (ten years).
const TTL_MAX_S: u64 = 3_650 * 86_400;

fn new_token() -> Result<Token, Failure> {
    Token::generate(false).map_err(|e| Failure::new(exit::FAILED, e))
}

/// Print a new token; `expires_unix_s` when it expires (0 never).
fn print_token(output: Format, user: &str, token: &Token, expires_unix_s: u64) {
    let expires = (expires_unix_s != 0).then(|| auth::utc(expires_unix_s));
    match output {
        Format::Json => out!(
            "{}",
            serde_json::json!({
                "user": user,
                "token_id": token.id,
                "token": token.to_string(),
                "expires": expires,
            })
        ),
        Format::Value => out!("{token}"),
        Format::Table => {
            out!("{token}");
            let until = expires.map_or(String::new(), |at| format!(", valid until {at}"));
            eprintln!(
                "token {} for user {user}{until}: shown only now; give it to clients as \
                 CREEK_TOKEN (or --token)",
                token.id
            );
        }
    }
}

/// Run `creek user`.
pub fn run_user(args: &UserArgs) -> Result<(), Failure> {
    let out = args.output.output;
    cli::runtime()?.block_on(async {
        let e = &args.endpoints;
        match &args.command {
            UserCommand::Add { name, roles } => {
                let token = new_token()?;
                let hash = Value::Bytes(Bytes::copy_from_slice(&token.hash()));
                let call_args = vec![bytes(name), bytes(&roles.join(",")), bytes(&token.id), hash];
                call(e, "auth.user_add", call_args, Levels::Strong).await?;
                print_token(out, name, &token, 0);
            }
            UserCommand::Token { name, ttl } => {
                let token = new_token()?;
                let hash = Value::Bytes(Bytes::copy_from_slice(&token.hash()));
                let mut call_args = vec![bytes(name), bytes(&token.id), hash];
                let expires = match ttl {
                    // The replicas compare the expiry with their clocks.
                    Some(ttl) => {
                        let at = auth::unix_now() + ttl;
                        call_args.push(Value::Int(i64::try_from(at).unwrap_or(i64::MAX)));
                        call(e, "auth.token_create_expiring", call_args, Levels::Strong).await?;
                        at
                    }
                    None => {
                        call(e, "auth.token_create", call_args, Levels::Strong).await?;
                        0
                    }
                };
                print_token(out, name, &token, expires);
            }
            UserCommand::Remove { name } => {
                let existed =
                    call(e, "auth.user_remove", vec![bytes(name)], Levels::Strong).await?;
                if existed != Value::Bool(true) {
                    return Err(Failure::new(exit::FAILED, format!("no user named {name}")));
                }
                out!("user {name} removed, with its tokens");
            }
            UserCommand::Revoke { which } => {
                let id = match Token::parse(which) {
                    Ok(t) => t.id,
                    Err(_) => which.trim().to_owned(),
                };
                let existed =
                    call(e, "auth.token_revoke", vec![bytes(&id)], Levels::Strong).await?;
                if existed != Value::Bool(true) {
                    return Err(Failure::new(exit::FAILED, format!("no token with id {id}")));
                }
                out!("token {id} revoked");
            }
            UserCommand::List => {
                // Strong: the committed users, as every replica enforces them.
                let v = call(e, "auth.user_list", Vec::new(), Levels::Strong).await?;
                for item in cli::list_items("auth.user_list", v)? {
                    let Some([name, roles, ids]) = item.as_list() else {
                        continue;
                    };
                    let texts = |v: &Value| -> Vec<String> {
                        v.as_list()
                            .unwrap_or_default()
                            .iter()
                            .map(cli::text_of)
                            .collect()
                    };
                    let (name, roles, ids) = (cli::text_of(name), texts(roles), texts(ids));
                    match out {
                        Format::Json => out!(
                            "{}",
                            serde_json::json!({ "name": name, "roles": roles, "token_ids": ids })
                        ),
                        Format::Value => out!("{name}"),
                        Format::Table => {
                            out!("{name:<24}  {:<32}  {}", roles.join(","), ids.join(","))
                        }
                    }
                }
            }
        }
        Ok(())
    })
}

/// Run `creek role`.
pub fn run_role(args: &RoleArgs) -> Result<(), Failure> {
    let out = args.output.output;
    cli::runtime()?.block_on(async {
        let e = &args.endpoints;
        match &args.command {
            RoleCommand::Set { name, grants } => {
                let call_args = vec![bytes(name), bytes(&grants.join(","))];
                call(e, "auth.role_set", call_args, Levels::Strong).await?;
                out!("role {name}: {}", grants.join(" "));
            }
            RoleCommand::List => {
                let v = call(e, "auth.role_list", Vec::new(), Levels::Strong).await?;
                for item in cli::list_items("auth.role_list", v)? {
                    let Some([name, grants]) = item.as_list() else {
                        continue;
                    };
                    let name = cli::text_of(name);
                    let grants: Vec<String> = grants
                        .as_list()
                        .unwrap_or_default()
                        .iter()
                        .map(cli::text_of)
                        .collect();
                    match out {
                        Format::Json => {
                            out!("{}", serde_json::json!({ "name": name, "grants": grants }))
                        }
                        Format::Value => out!("{name}"),
                        Format::Table => out!("{name:<24}  {}", grants.join(" ")),
                    }
                }
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::parse_ttl;

    #[test]
    fn ttls_take_a_unit_and_stay_in_bounds() {
        assert_eq!(parse_ttl("90s"), Ok(90));
        assert_eq!(parse_ttl("30m"), Ok(1_800));
        assert_eq!(parse_ttl(" 12h "), Ok(43_200));
        assert_eq!(parse_ttl("7d"), Ok(604_800));
        for bad in ["", "12", "h", "1.5h", "-1h", "3w"] {
            let e = parse_ttl(bad).expect_err(bad);
            assert!(e.contains("unit s, m, h or d"), "{bad}: {e}");
        }
        for (bad, says) in [
            ("0s", "positive"),
            ("3651d", "at most 3650 days"),
            ("99999999999999999d", "at most"),
        ] {
            let e = parse_ttl(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
