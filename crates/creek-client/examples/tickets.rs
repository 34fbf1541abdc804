//! A ticket seller on a queue: Correctables Listing 5 (§4.3).
//!
//! An organizer enqueues the tickets of an event, numbered so that a
//! ticket's number says how many are left (the first out is #TICKETS, the
//! last #1). Retailers, each near a different replica, sell them with one
//! strong `queue.dequeue` per buyer, invoked with both views:
//!
//! - on a preliminary view (the replica's tentative state, fast) whose
//!   ticket number is above the threshold, many tickets are left: the sale
//!   is confirmed at once and the dequeue completes in the background;
//! - otherwise the buyer waits for the final view (the committed order):
//!   a ticket if it holds one, else "Sold out. Sorry!".
//!
//! The final views decide who holds which ticket; the run ends with an
//! audit of them. Selling on a preliminary view is safe only while the
//! sales a replica has not heard of yet are fewer than the threshold, so
//! each retailer keeps one dequeue in flight (its buyer may already have
//! been answered). The Python port of this example found that without that
//! rule retailers outrun the replicas' gossip, every preliminary view looks
//! full, and the audit catches the overselling.
//!
//! ```text
//! creek dev &
//! cargo run -p creek-client --example tickets -- [--addresses 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003]
//!     [--tickets 100] [--threshold 20] [--retailers 3] [--buyers 125]
//! ```
//!
//! The end-to-end test `crates/creek/tests/apps_e2e.rs` includes this file
//! as a module and calls [`run`] against a cluster of `creek serve`
//! processes, so the code tested is the code this example runs (`main`
//! and the argument parsing are the only parts it skips).

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use creek_client::{CallOptions, Client, Correctable, Error, Levels, Outcome, View, ViewKind};
use creek_types::value::Value;
use tokio::sync::oneshot;

/// What one run sells, where, and how.
#[derive(Clone, Debug)]
pub struct Config {
    /// Client endpoints of the replicas.
    pub addrs: Vec<String>,
    /// Tickets the organizer puts on sale.
    pub tickets: i64,
    /// Sell on a preliminary view only if its ticket number is above this.
    pub threshold: i64,
    /// Retailers selling at once; retailer `r` is nearest replica `r % n`.
    pub retailers: usize,
    /// Buyers, served in turn by the retailers.
    pub buyers: usize,
    /// Deadline of every call's closing view.
    pub timeout: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            addrs: ["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"]
                .map(String::from)
                .to_vec(),
            tickets: 100,
            threshold: 20,
            retailers: 3,
            buyers: 125,
            timeout: Duration::from_secs(30),
        }
    }
}

/// How a buyer was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Answer {
    /// Sold on a preliminary view: many tickets were left.
    TicketOnPreliminary,
    /// Sold on the final view.
    TicketOnFinal,
    /// "Sold out. Sorry!", on the final view.
    SoldOut,
}

/// What a buyer was told, and when.
#[derive(Clone, Copy, Debug)]
pub struct Told {
    /// The answer.
    pub answer: Answer,
    /// The ticket number the answering view showed (none when sold out).
    pub ticket: Option<i64>,
    /// From the dequeue's invocation to the answering view.
    pub after: Duration,
}

/// One buyer's purchase.
#[derive(Clone, Debug)]
pub struct Sale {
    /// Which buyer.
    pub buyer: usize,
    /// Which retailer served them.
    pub retailer: usize,
    /// What they were told; none if the call failed first.
    pub told: Option<Told>,
    /// The ticket the dequeue's final view gave them: what they hold.
    pub final_ticket: Option<i64>,
    /// Why the outcome is unknown, if it is.
    pub error: Option<String>,
}

/// The outcome of a run.
#[derive(Clone, Debug)]
pub struct Report {
    /// The queue the tickets were in.
    pub event: String,
    /// The run's settings.
    pub config: Config,
    /// Every buyer's purchase, by buyer.
    pub sales: Vec<Sale>,
    /// What the audit found wrong; empty if it passed.
    pub problems: Vec<String>,
}

/// The buyer's answer, or why the purchase failed.
type Answered = Result<Told, String>;

/// Listing 5's `done`, and the buyer waiting for an answer: whichever view
/// answers first takes the sender.
#[derive(Clone)]
struct Buyer(Arc<Mutex<Option<oneshot::Sender<Answered>>>>);

impl Buyer {
    fn done(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none()
    }

    fn tell(&self, told: Answered) {
        let sender = self.0.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(tx) = sender {
            // The buyer may have gone away; nothing to tell then.
            let _: Result<(), _> = tx.send(told);
        }
    }
}

/// Listing 5: one purchase. Returns the channel on which the buyer is
/// answered: on the first preliminary view showing a ticket above
/// `threshold`, else on the final view.
fn purchase_ticket(op: &Correctable, threshold: i64) -> oneshot::Receiver<Answered> {
    let (tx, rx) = oneshot::channel();
    let buyer = Buyer(Arc::new(Mutex::new(Some(tx))));
    op.on_update({
        let buyer = buyer.clone();
        move |weak: &View| {
            // `on_update` sees the closing view too; `on_final` handles it.
            if weak.kind != ViewKind::Preliminary || buyer.done() {
                return;
            }
            if let Ok(Some(n)) = ticket_number(&weak.outcome) {
                if n > threshold {
                    // Many tickets left, so we can sell.
                    buyer.tell(Ok(Told {
                        answer: Answer::TicketOnPreliminary,
                        ticket: Some(n),
                        after: weak.latency,
                    }));
                }
            }
        }
    })
    .on_final({
        let buyer = buyer.clone();
        move |strong: &View| {
            buyer.tell(ticket_number(&strong.outcome).map(|ticket| Told {
                answer: match ticket {
                    Some(_) => Answer::TicketOnFinal, // we managed to get a ticket
                    None => Answer::SoldOut,
                },
                ticket,
                after: strong.latency,
            }));
        }
    })
    .on_error(move |e: &Error| buyer.tell(Err(e.to_string())));
    rx
}

/// The ticket a dequeue's view shows: its number, none if the queue was
/// empty.
fn ticket_number(outcome: &Outcome) -> Result<Option<i64>, String> {
    match outcome {
        Ok(Value::Nil) => Ok(None),
        Ok(Value::Bytes(b)) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .map(Some)
            .ok_or_else(|| format!("not a ticket: {b:?}")),
        Ok(other) => Err(format!("not a ticket: {other}")),
        Err(abort) => Err(format!("queue.dequeue aborted: {abort}")),
    }
}

/// One retailer serving its buyers in turn.
async fn retailer(
    client: Client,
    retailer: usize,
    buyers: Vec<usize>,
    event: String,
    config: Config,
) -> Vec<Sale> {
    let options = CallOptions {
        timeout: Some(config.timeout),
        ..CallOptions::default()
    };
    let mut sales = Vec::with_capacity(buyers.len());
    for buyer in buyers {
        let mut sale = Sale {
            buyer,
            retailer,
            told: None,
            final_ticket: None,
            error: None,
        };
        let args = vec![Value::from(event.as_str())];
        match client
            .invoke_with("queue.dequeue", args, Levels::Both, options)
            .await
        {
            Err(e) => sale.error = Some(e.to_string()),
            Ok(op) => {
                match purchase_ticket(&op, config.threshold).await {
                    Ok(Ok(told)) => sale.told = Some(told),
                    Ok(Err(e)) => sale.error = Some(e),
                    Err(_) => sale.error = Some("the purchase was never answered".into()),
                }
                // The buyer has their answer; the dequeue may still be
                // completing. Wait for it before the next buyer: one dequeue
                // in flight per retailer bounds the sales another replica's
                // preliminary view can miss (see the module notes).
                match op.final_view().await.map(|v| ticket_number(&v.outcome)) {
                    Ok(Ok(ticket)) => sale.final_ticket = ticket,
                    Ok(Err(e)) => sale.error = Some(e),
                    Err(e) => sale.error = Some(e.to_string()),
                }
            }
        }
        sales.push(sale);
    }
    sales
}

/// Put `config.tickets` tickets on sale, sell them to `config.buyers`
/// buyers through `config.retailers` retailers, and audit the final views.
/// Fails only if the tickets could not be put on sale; a failed purchase
/// is reported by the audit.
pub async fn run(config: Config) -> Result<Report, Error> {
    if config.addrs.is_empty() || config.retailers == 0 || config.tickets < 1 {
        return Err(Error::InvalidArgument(
            "need an address, a retailer and a ticket".into(),
        ));
    }
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let event = format!("tickets-{}-{nanos}", std::process::id());

    // Each retailer talks to a different replica first (and fails over to
    // the others).
    let n = config.addrs.len();
    let mut clients = Vec::with_capacity(config.retailers);
    for r in 0..config.retailers {
        let near = r % n;
        let addrs = config.addrs[near..].iter().chain(&config.addrs[..near]);
        clients.push(Client::connect(addrs.cloned()).await?);
    }

    // The organizer: ticket #TICKETS first, #1 last.
    let organizer = &clients[0];
    let options = CallOptions {
        timeout: Some(config.timeout),
        ..CallOptions::default()
    };
    for ticket in (1..=config.tickets).rev() {
        let args = vec![
            Value::from(event.as_str()),
            Value::from(ticket.to_string().as_str()),
        ];
        let op = organizer
            .invoke_with("queue.enqueue", args, Levels::Strong, options)
            .await?;
        if let Err(abort) = op.final_view().await?.outcome {
            return Err(Error::InvalidArgument(format!(
                "queue.enqueue aborted: {abort}"
            )));
        }
    }

    let mut tasks = Vec::with_capacity(config.retailers);
    for (r, client) in clients.into_iter().enumerate() {
        let buyers = (r..config.buyers).step_by(config.retailers).collect();
        let task = retailer(client, r, buyers, event.clone(), config.clone());
        tasks.push(tokio::spawn(task));
    }
    let mut sales = Vec::with_capacity(config.buyers);
    for task in tasks {
        match task.await {
            Ok(s) => sales.extend(s),
            Err(e) => return Err(Error::Protocol(format!("a retailer panicked: {e}"))),
        }
    }
    sales.sort_by_key(|s| s.buyer);
    let problems = audit(config.tickets, &sales);
    Ok(Report {
        event,
        config,
        sales,
        problems,
    })
}

/// What is wrong with `sales` of `tickets` tickets, from the final views.
pub fn audit(tickets: i64, sales: &[Sale]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut holders: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for s in sales {
        if let Some(t) = s.final_ticket {
            holders.entry(t).or_default().push(s.buyer);
        }
        if let Some(e) = &s.error {
            problems.push(format!("buyer {}: outcome unknown: {e}", s.buyer));
        }
        if let Some(told) = s.told {
            let sold = told.answer != Answer::SoldOut;
            if sold && s.final_ticket.is_none() {
                problems.push(format!(
                    "buyer {} was sold ticket #{} ({:?}) but the final view gave them none: oversold",
                    s.buyer,
                    told.ticket.unwrap_or_default(),
                    told.answer
                ));
            }
            if !sold && s.final_ticket.is_some() {
                problems.push(format!(
                    "buyer {} was told sold out but holds a ticket",
                    s.buyer
                ));
            }
        }
    }
    for (ticket, buyers) in &holders {
        if buyers.len() > 1 {
            problems.push(format!("ticket #{ticket} was sold to buyers {buyers:?}"));
        }
        if !(1..=tickets).contains(ticket) {
            problems.push(format!("ticket #{ticket} was never printed"));
        }
    }
    let held = holders.len() as i64;
    let turned_away = sales
        .iter()
        .any(|s| s.told.is_some_and(|t| t.answer == Answer::SoldOut));
    if turned_away && held < tickets {
        problems.push(format!(
            "a buyer was told sold out while {} tickets were unsold",
            tickets - held
        ));
    }
    problems
}

impl Report {
    /// The purchases answered with `answer`.
    pub fn answered(&self, answer: Answer) -> Vec<&Sale> {
        let is = |s: &&Sale| s.told.is_some_and(|t| t.answer == answer);
        self.sales.iter().filter(is).collect()
    }

    /// Early sales whose final view gave a different ticket than the one
    /// the preliminary view showed (another replica sold that one first).
    pub fn corrected(&self) -> usize {
        let differs = |s: &&&Sale| s.told.and_then(|t| t.ticket) != s.final_ticket;
        self.answered(Answer::TicketOnPreliminary)
            .iter()
            .filter(differs)
            .count()
    }

    /// How many sales the preliminary views missed at most: the largest
    /// gap between the ticket number an early sale was told and the one
    /// its final view gave. Selling on preliminary views oversells when
    /// this reaches the threshold.
    pub fn largest_lag(&self) -> i64 {
        let lag = |s: &&Sale| Some(s.told?.ticket? - s.final_ticket?);
        let early = self.answered(Answer::TicketOnPreliminary);
        early.iter().filter_map(lag).max().unwrap_or(0).max(0)
    }

    /// Print what happened.
    pub fn print(&self) {
        let c = &self.config;
        println!(
            "{} tickets for {}; threshold {}; {} retailers at {}; {} buyers",
            c.tickets,
            self.event,
            c.threshold,
            c.retailers,
            c.addrs.join(", "),
            c.buyers
        );
        for (answer, what) in [
            (Answer::TicketOnPreliminary, "sold on the preliminary view"),
            (Answer::TicketOnFinal, "sold on the final view"),
            (Answer::SoldOut, "told \"Sold out. Sorry!\""),
        ] {
            let group = self.answered(answer);
            println!("{:>5} {what:<30} {}", group.len(), latencies(&group));
        }
        println!(
            "{} early sales got another ticket number in the final view (another replica sold the one they saw); \
             the preliminary views missed up to {} sales (threshold {})",
            self.corrected(),
            self.largest_lag(),
            c.threshold
        );
        if self.problems.is_empty() {
            let held = self.sales.iter().filter(|s| s.final_ticket.is_some());
            println!(
                "audit: passed ({} distinct tickets held, none sold twice, none oversold)",
                held.count()
            );
        } else {
            println!("AUDIT FAILED:");
            for p in &self.problems {
                println!("  {p}");
            }
        }
    }
}

/// "mean m ms, p50 a ms, max b ms" of the answers' latencies.
fn latencies(sales: &[&Sale]) -> String {
    let mut ms: Vec<f64> = sales
        .iter()
        .filter_map(|s| s.told.map(|t| t.after.as_secs_f64() * 1e3))
        .collect();
    if ms.is_empty() {
        return String::new();
    }
    ms.sort_by(f64::total_cmp);
    let mean = ms.iter().sum::<f64>() / ms.len() as f64;
    let p50 = ms[ms.len() / 2];
    let max = ms[ms.len() - 1];
    format!("mean {mean:6.1} ms, p50 {p50:6.1} ms, max {max:6.1} ms")
}

const USAGE: &str = "usage: tickets [--addresses host:port,...] [--tickets N] \
                     [--threshold N] [--retailers N] [--buyers N]";

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Config, String> {
    let mut config = Config::default();
    let mut buyers = None;
    while let Some(flag) = args.next() {
        if flag == "-h" || flag == "--help" {
            return Err(USAGE.into());
        }
        let value = args
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let number = |v: &str| {
            v.parse::<u32>()
                .map_err(|e| format!("{flag} {v}: {e}\n{USAGE}"))
        };
        match flag.as_str() {
            "--addresses" => config.addrs = value.split(',').map(String::from).collect(),
            "--tickets" => config.tickets = number(&value)?.into(),
            "--threshold" => config.threshold = number(&value)?.into(),
            "--retailers" => config.retailers = number(&value)? as usize,
            "--buyers" => buyers = Some(number(&value)? as usize),
            _ => return Err(format!("unknown argument {flag}\n{USAGE}")),
        }
    }
    // More buyers than tickets by default, so the stock runs out.
    config.buyers = buyers.unwrap_or((config.tickets + config.tickets / 4) as usize);
    Ok(config)
}

#[tokio::main]
async fn main() -> ExitCode {
    let config = match parse_args(std::env::args().skip(1)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(config).await {
        Ok(report) => {
            report.print();
            if report.problems.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("tickets: {e}");
            ExitCode::from(2)
        }
    }
}
