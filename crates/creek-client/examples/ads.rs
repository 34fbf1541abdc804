//! An ad server that speculates: Correctables Listing 4 (§4.2).
//!
//! A user profile's ad references are a set (`set.*`); each ad's content
//! sits under its own key. To serve a user, the references are read with
//! both views and the read is speculated on: on the preliminary view the
//! ads it names are fetched (`kv.get` of each) and rendered while the final
//! view is on its way. If the final view shows the same references, the
//! render is delivered as soon as both are ready; otherwise the abort
//! callback discards the stale render and the ads are fetched again for
//! the final view.
//!
//! The speculation function of [`Correctable::speculate_with_abort`] runs
//! in the task delivering views and must not block, while fetching ads
//! takes calls. So it *starts* the fetch as a task and returns the
//! render's number; the abort callback cancels that task, and the request
//! awaits the task its final view names.
//!
//! Round 1 serves each profile quietly (the speculation should hold).
//! Round 2 adds an interest at another replica while the read is under
//! way, which may make the preliminary view stale (then the speculation is
//! redone; a partition makes it certain, see the end-to-end test).
//!
//! ```text
//! creek dev &
//! cargo run -p creek-client --example ads -- [--addresses 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003]
//! ```
//!
//! The end-to-end test `crates/creek/tests/apps_e2e.rs` includes this file
//! as a module and drives [`AdServer`] against a cluster of `creek serve`
//! processes, so the code tested is the code this example runs; it skips
//! only `main`, the argument parsing and `rounds` (whose round 2 it
//! replaces with a partition, to make the misspeculation certain).

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use creek_client::{CallOptions, Client, Correctable, Error, Levels, Outcome, View, ViewKind};
use creek_types::value::Value;
use tokio::task::JoinHandle;

/// The ads on offer: id and content. Published once, never changed.
pub const ADS: &[(&str, &str)] = &[
    ("a1", "Cheap flights to Lisbon"),
    ("a2", "Running shoes, 30% off"),
    ("a3", "Learn Rust in a weekend"),
    ("a4", "Fresh coffee beans, delivered"),
    ("a5", "Noise-cancelling headphones"),
];

/// The user profiles and the ads each one references.
pub const PROFILES: &[(&str, &[&str])] = &[
    ("alice", &["a1", "a2"]),
    ("bob", &["a3"]),
    ("carol", &["a2", "a4", "a5"]),
];

/// What can go wrong serving ads: a call failed, or the store holds
/// something that is not what this application wrote.
pub type AppError = Box<dyn std::error::Error + Send + Sync>;

/// A render: the ads a view of the references names, fetched and
/// post-processed (running, or done).
type Render = JoinHandle<Result<Vec<String>, Error>>;

/// A render started: the kind of view it ran on and the references it
/// fetched.
pub type Ran = (ViewKind, Vec<String>);

/// The renders of one request, by number, with the references each ran on.
type Renders = Arc<Mutex<BTreeMap<i64, (Vec<String>, Render)>>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Serves ads from one cluster; `tag` keeps each run's keys apart.
#[derive(Clone, Debug)]
pub struct AdServer {
    /// The connection (the replica nearest this server first).
    pub client: Client,
    /// Prefix of every key this server reads and writes.
    pub tag: String,
    /// Deadline of every call's closing view.
    pub timeout: Duration,
}

/// One ad request in progress: the references' Correctable and the
/// speculation on it.
pub struct Request {
    /// The user served.
    pub user: String,
    /// The read of the user's ad references.
    pub refs: Correctable,
    /// The speculation: a view per render, naming the render by number.
    pub page: Correctable,
    started: Instant,
    renders: Renders,
    /// Every render started: the kind of view it ran on and its references.
    ran: Arc<Mutex<Vec<Ran>>>,
    /// The references of every render the abort callback discarded.
    discarded: Arc<Mutex<Vec<Vec<String>>>>,
}

/// A request served.
#[derive(Clone, Debug)]
pub struct Served {
    /// The user served.
    pub user: String,
    /// The views of the user's ad references, in order.
    pub refs_views: Vec<View>,
    /// Every render started, in order: the kind of view it ran on and the
    /// references it fetched.
    pub ran: Vec<Ran>,
    /// The references of the renders discarded as wrong speculation.
    pub discarded: Vec<Vec<String>>,
    /// The rendered ads delivered.
    pub ads: Vec<String>,
    /// From the request to the delivery.
    pub delivered_after: Duration,
}

impl Served {
    /// Whether the first speculation held: one render, on the preliminary
    /// view, delivered.
    pub fn speculation_held(&self) -> bool {
        self.discarded.is_empty() && matches!(self.ran.as_slice(), [(ViewKind::Preliminary, _)])
    }

    /// Print one line per view and the verdict.
    pub fn print(&self) {
        println!("  {}:", self.user);
        for v in &self.refs_views {
            let refs = refs_of(&v.outcome).map_or_else(|e| e, |r| r.join(","));
            println!(
                "    {:<12} references after {:7.2} ms: {refs}",
                format!("{:?}", v.kind),
                ms(v.latency)
            );
        }
        if self.speculation_held() {
            println!(
                "    speculation held: ads fetched once, on the preliminary view; delivered after {:.2} ms",
                ms(self.delivered_after)
            );
        } else {
            let discarded: Vec<String> = self.discarded.iter().map(|r| r.join(",")).collect();
            println!(
                "    misspeculation: abort discarded the render of [{}]; ads fetched again; delivered after {:.2} ms",
                discarded.join("], ["),
                ms(self.delivered_after)
            );
        }
        for ad in &self.ads {
            println!("      {ad}");
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The ad ids in a view of a profile's references (`set.read`: a sorted
/// list of byte strings).
fn refs_of(outcome: &Outcome) -> Result<Vec<String>, String> {
    let items = match outcome {
        Ok(Value::List(items)) => items,
        Ok(other) => return Err(format!("not a set of ad references: {other}")),
        Err(abort) => return Err(format!("set.read aborted: {abort}")),
    };
    items
        .iter()
        .map(|v| match v {
            Value::Bytes(b) => String::from_utf8(b.to_vec()).map_err(|e| e.to_string()),
            other => Err(format!("not an ad reference: {other}")),
        })
        .collect()
}

/// What a user is shown for ad `id` with content `content` (the
/// post-processing of Listing 4's `getAds`).
pub fn render_ad(id: &str, content: Option<&str>) -> String {
    match content {
        Some(c) => format!("[{id}] {}", c.to_uppercase()),
        None => format!("[{id}] (withdrawn)"),
    }
}

/// The ads a request for references `refs` must deliver.
pub fn expected_ads(refs: &[&str]) -> Vec<String> {
    refs.iter()
        .map(|id| {
            let content = ADS.iter().find(|(a, _)| a == id).map(|(_, c)| *c);
            render_ad(id, content)
        })
        .collect()
}

impl AdServer {
    /// An ad server on `client`, with keys under a tag new to this run.
    pub fn new(client: Client) -> AdServer {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        AdServer {
            client,
            tag: format!("ads-{}-{nanos}", std::process::id()),
            timeout: Duration::from_secs(30),
        }
    }

    /// The same store through another connection.
    pub fn with_client(&self, client: Client) -> AdServer {
        AdServer {
            client,
            ..self.clone()
        }
    }

    fn ad_key(&self, id: &str) -> Value {
        Value::from(format!("{}:ad:{id}", self.tag).as_str())
    }

    fn profile_key(&self, user: &str) -> Value {
        Value::from(format!("{}:profile:{user}", self.tag).as_str())
    }

    fn options(&self) -> CallOptions {
        CallOptions {
            timeout: Some(self.timeout),
            ..CallOptions::default()
        }
    }

    /// Invoke and wait for the closing view; an abort is an error here.
    async fn call(
        &self,
        procedure: &str,
        args: Vec<Value>,
        levels: Levels,
    ) -> Result<Value, AppError> {
        let op = self
            .client
            .invoke_with(procedure, args, levels, self.options())
            .await?;
        Ok(op
            .final_view()
            .await?
            .outcome
            .map_err(|abort| format!("{procedure} aborted: {abort}"))?)
    }

    /// Publish [`ADS`] and [`PROFILES`] with strong ops.
    pub async fn seed(&self) -> Result<(), AppError> {
        for (id, content) in ADS {
            let args = vec![self.ad_key(id), Value::from(*content)];
            self.call("kv.put", args, Levels::Strong).await?;
        }
        for (user, refs) in PROFILES {
            for id in *refs {
                self.add_interest(user, id).await?;
            }
        }
        Ok(())
    }

    /// Add ad `id` to `user`'s references, with a strong op.
    pub async fn add_interest(&self, user: &str, id: &str) -> Result<(), AppError> {
        let args = vec![self.profile_key(user), Value::from(id)];
        self.call("set.add", args, Levels::Strong).await?;
        Ok(())
    }

    /// Read `user`'s references with a strong op's final view only.
    pub async fn interests(&self, user: &str) -> Result<Vec<String>, AppError> {
        let refs = self
            .call("set.read", vec![self.profile_key(user)], Levels::Strong)
            .await?;
        Ok(refs_of(&Ok(refs))?)
    }

    /// Listing 4's `getAds`: fetch the ads `refs` names and render them.
    /// Ads never change once published, so weak reads are enough; they
    /// are all invoked before any is awaited.
    async fn get_ads(self, refs: Vec<String>) -> Result<Vec<String>, Error> {
        let mut reads = Vec::with_capacity(refs.len());
        for id in &refs {
            reads.push(
                self.client
                    .invoke_weak("kv.get", vec![self.ad_key(id)])
                    .await?,
            );
        }
        let mut ads = Vec::with_capacity(refs.len());
        for (id, read) in refs.iter().zip(reads) {
            let content = match read.final_view().await?.outcome {
                Ok(Value::Bytes(b)) => Some(String::from_utf8_lossy(&b).into_owned()),
                _ => None,
            };
            ads.push(render_ad(id, content.as_deref()));
        }
        Ok(ads)
    }

    /// Listing 4 up to its `speculate`: read `user`'s references with both
    /// views and speculate on them. The request is under way when this
    /// returns; [`Request::deliver`] finishes it.
    pub async fn request(&self, user: &str) -> Result<Request, Error> {
        let started = Instant::now();
        let refs = self
            .client
            .invoke_with(
                "set.read",
                vec![self.profile_key(user)],
                Levels::Both,
                self.options(),
            )
            .await?;
        let renders: Renders = Arc::default();
        let ran: Arc<Mutex<Vec<Ran>>> = Arc::default();
        let discarded: Arc<Mutex<Vec<Vec<String>>>> = Arc::default();
        let runtime = tokio::runtime::Handle::current();
        let speculation = {
            let (server, renders, ran) = (self.clone(), renders.clone(), ran.clone());
            let mut last = 0;
            move |view: &View| -> Outcome {
                let ids = refs_of(&view.outcome)?;
                last += 1;
                let task = runtime.spawn(server.clone().get_ads(ids.clone()));
                lock(&ran).push((view.kind, ids.clone()));
                lock(&renders).insert(last, (ids, task));
                Ok(Value::Int(last))
            }
        };
        let abort = {
            let (renders, discarded) = (renders.clone(), discarded.clone());
            move |stale: &Outcome| {
                let Ok(Value::Int(number)) = stale else {
                    return;
                };
                if let Some((ids, task)) = lock(&renders).remove(number) {
                    task.abort(); // discard the stale render, done or not
                    lock(&discarded).push(ids);
                }
            }
        };
        let page = refs.speculate_with_abort(speculation, abort);
        Ok(Request {
            user: user.to_owned(),
            refs,
            page,
            started,
            renders,
            ran,
            discarded,
        })
    }

    /// `fetchAdsByUserId` (Listing 4): request and deliver.
    pub async fn fetch_ads_by_user_id(&self, user: &str) -> Result<Served, AppError> {
        self.request(user).await?.deliver().await
    }
}

impl Request {
    /// Listing 4's `onFinal`: once the speculation's final view names the
    /// render that holds, deliver that render when it is done.
    pub async fn deliver(self) -> Result<Served, AppError> {
        let settled = self.page.final_view().await?;
        let number = match settled.outcome {
            Ok(Value::Int(n)) => n,
            Ok(other) => return Err(format!("not a render number: {other}").into()),
            Err(e) => return Err(e.into()),
        };
        let render = lock(&self.renders).remove(&number);
        let Some((_, task)) = render else {
            return Err(format!("render {number} is gone").into());
        };
        let ads = task.await??;
        let delivered_after = self.started.elapsed();
        let mut refs_views = Vec::new();
        let mut views = self.refs.views();
        while let Some(v) = views.next_view().await {
            refs_views.push(v?);
        }
        let ran = lock(&self.ran).clone();
        let discarded = lock(&self.discarded).clone();
        Ok(Served {
            user: self.user,
            refs_views,
            ran,
            discarded,
            ads,
            delivered_after,
        })
    }
}

const USAGE: &str = "usage: ads [--addresses host:port,...]";

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Vec<String>, String> {
    let mut addrs = ["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"]
        .map(String::from)
        .to_vec();
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next()) {
            ("--addresses", Some(v)) => addrs = v.split(',').map(String::from).collect(),
            _ => return Err(USAGE.into()),
        }
    }
    Ok(addrs)
}

async fn rounds(addrs: Vec<String>) -> Result<(), AppError> {
    // The server near the first replica; a second connection near another
    // one, where the user's interests change.
    let near = AdServer::new(Client::connect(addrs.clone()).await?);
    let mut rotated = addrs.clone();
    rotated.rotate_left(1);
    let other = near.with_client(Client::connect(rotated).await?);
    near.seed().await?;
    println!(
        "{} ads, {} profiles under {}",
        ADS.len(),
        PROFILES.len(),
        near.tag
    );

    println!("round 1: quiet reads at {}", near.client.replica_addr());
    for (user, _) in PROFILES {
        near.fetch_ads_by_user_id(user).await?.print();
    }

    println!(
        "round 2: alice takes an interest in a3 at {} while her ads are read at {}",
        other.client.replica_addr(),
        near.client.replica_addr()
    );
    // The change is under way (it ran tentatively at the other replica);
    // the read races its commit, so its views may disagree.
    let args = vec![other.profile_key("alice"), Value::from("a3")];
    let change = other
        .client
        .invoke_with("set.add", args, Levels::Both, other.options())
        .await?;
    change.preliminary().await?;
    let served = near.fetch_ads_by_user_id("alice").await?;
    change.final_view().await?;
    served.print();
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let addrs = match parse_args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match rounds(addrs).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ads: {e}");
            ExitCode::FAILURE
        }
    }
}
