//! The terminal input generator (clause 5.2.3 mix, clause 2.x.1 inputs).
//!
//! One [`Generator`] is one terminal: a home warehouse, a fixed district
//! for Stock-Level, its own seeded [`Rng`]. Each [`Generator::next`] picks
//! a transaction by the minimum mix 45/43/4/4/4 and draws its inputs by
//! the specification's rules (NURand customer and item ids, 60% selection
//! by last name, 1% New-Order rollback, 1% remote order lines, 15% remote
//! Payment). Whether a call runs weak or strong is the caller's choice;
//! [`TpccCall::is_payment`] supports the usual "Payment strong" split.

use bytes::Bytes;

use super::random::{last_name, NuRandC, Rng, TpccRandom};
use super::{delivery, new_order, order_status, payment, stock_level};
use super::{
    CustomerSelector, ScaleError, TpccScale, DELIVERY, NEW_ORDER, ORDER_STATUS, PAYMENT,
    STOCK_LEVEL,
};

/// One terminal's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GeneratorConfig {
    /// The database's size.
    pub scale: TpccScale,
    /// The terminal's home warehouse (1..=warehouses).
    pub home_w_id: u16,
    /// The terminal's district for Stock-Level (1..=districts).
    pub stock_level_d_id: u8,
    /// Run-time NURand constants ([`NuRandC::for_run`] of the load's).
    pub constants: NuRandC,
}

impl GeneratorConfig {
    /// Check the scale and that the terminal's warehouse and district exist.
    pub fn validate(&self) -> Result<(), ScaleError> {
        self.scale.validate()?;
        let in_range = |what, id: u32, max: u32| {
            if (1..=max).contains(&id) {
                Ok(())
            } else {
                Err(ScaleError::TerminalOutOfRange { what, id, max })
            }
        };
        in_range(
            "home_w_id",
            u32::from(self.home_w_id),
            u32::from(self.scale.warehouses),
        )?;
        in_range(
            "stock_level_d_id",
            u32::from(self.stock_level_d_id),
            u32::from(self.scale.districts_per_warehouse),
        )
    }
}

/// One generated call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TpccCall {
    /// The procedure name.
    pub name: &'static str,
    /// Its encoded arguments.
    pub args: Bytes,
}

impl TpccCall {
    /// Whether this is a Payment.
    pub fn is_payment(&self) -> bool {
        self.name == PAYMENT
    }
}

/// A terminal's input generator.
#[derive(Clone, Debug)]
pub struct Generator {
    cfg: GeneratorConfig,
    rng: Rng,
    /// The warehouses a remote access is drawn from (first, last), the home
    /// one among them: every warehouse, or those of the home warehouse's
    /// shard on a sharded cluster.
    remote: (u16, u16),
}

impl Generator {
    /// A generator for `cfg` drawing from a PRNG seeded with `seed`, or
    /// why `cfg` is refused.
    pub fn new(cfg: GeneratorConfig, seed: u64) -> Result<Self, ScaleError> {
        cfg.validate()?;
        Ok(Generator {
            cfg,
            rng: Rng::new(seed),
            remote: (1, cfg.scale.warehouses),
        })
    }

    /// Draw remote warehouses (remote order lines, remote Payment
    /// customers) from `first..=last` only, e.g. the warehouses of the home
    /// warehouse's shard, so that every transaction stays on one shard. The
    /// range is clamped to the database and always holds the home
    /// warehouse.
    pub fn remote_within(mut self, first: u16, last: u16) -> Self {
        let home = self.cfg.home_w_id;
        let first = first.clamp(1, home);
        let last = last.clamp(home, self.cfg.scale.warehouses);
        self.remote = (first, last);
        self
    }

    /// The next call; `now` is the date the transaction records.
    pub fn next(&mut self, now: i64) -> TpccCall {
        let roll = self.rng.uniform(1, 100);
        let (name, args) = match roll {
            1..=45 => (NEW_ORDER, self.new_order(now).encode()),
            46..=88 => (PAYMENT, self.payment(now).encode()),
            89..=92 => (ORDER_STATUS, self.order_status().encode()),
            93..=96 => (DELIVERY, self.delivery(now).encode()),
            _ => (STOCK_LEVEL, self.stock_level().encode()),
        };
        TpccCall { name, args }
    }

    fn district(&mut self) -> u8 {
        self.rng
            .uniform(1, i64::from(self.cfg.scale.districts_per_warehouse)) as u8
    }

    fn customer_id(&mut self) -> u32 {
        let c = i64::from(self.cfg.scale.customers_per_district);
        self.rng.nurand(1023, 1, c, self.cfg.constants.c_id) as u32
    }

    /// A warehouse of the remote range other than the home one, or the
    /// home one if it is alone there.
    fn remote_warehouse(&mut self) -> u16 {
        let home = self.cfg.home_w_id;
        let (first, last) = self.remote;
        if last <= first {
            return home;
        }
        let pick = self.rng.uniform(i64::from(first), i64::from(last) - 1) as u16;
        if pick >= home {
            pick + 1
        } else {
            pick
        }
    }

    /// 60% by last name, 40% by id (clauses 2.5.1.2 and 2.6.1.2). Only the
    /// names the population can produce are drawn.
    fn customer(&mut self) -> CustomerSelector {
        if self.rng.percent(60) {
            let names = i64::from(self.cfg.scale.customers_per_district.min(1000));
            let n = self
                .rng
                .nurand(255, 0, names - 1, self.cfg.constants.c_last);
            CustomerSelector::LastName(last_name(n))
        } else {
            CustomerSelector::Id(self.customer_id())
        }
    }

    fn new_order(&mut self, now: i64) -> new_order::Input {
        let d_id = self.district();
        let c_id = self.customer_id();
        let ol_cnt = self.rng.uniform(5, 15);
        let rollback = self.rng.percent(1);
        let items = i64::from(self.cfg.scale.items);
        let lines = (1..=ol_cnt)
            .map(|n| {
                let i_id = if rollback && n == ol_cnt {
                    items + 1
                } else {
                    self.rng.nurand(8191, 1, items, self.cfg.constants.ol_i_id)
                };
                let supply_w_id = if self.rng.percent(1) {
                    self.remote_warehouse()
                } else {
                    self.cfg.home_w_id
                };
                new_order::Line {
                    i_id: i_id as u32,
                    supply_w_id,
                    quantity: self.rng.uniform(1, 10) as u8,
                }
            })
            .collect();
        new_order::Input {
            w_id: self.cfg.home_w_id,
            d_id,
            c_id,
            entry_d: now,
            lines,
        }
    }

    fn payment(&mut self, now: i64) -> payment::Input {
        let d_id = self.district();
        let (c_w_id, c_d_id) = if self.rng.percent(85) {
            (self.cfg.home_w_id, d_id)
        } else {
            let w = self.remote_warehouse();
            (w, self.district())
        };
        payment::Input {
            w_id: self.cfg.home_w_id,
            d_id,
            c_w_id,
            c_d_id,
            customer: self.customer(),
            amount: self.rng.uniform(100, 500_000),
            date: now,
        }
    }

    fn order_status(&mut self) -> order_status::Input {
        order_status::Input {
            w_id: self.cfg.home_w_id,
            d_id: self.district(),
            customer: self.customer(),
        }
    }

    fn delivery(&mut self, now: i64) -> delivery::Input {
        delivery::Input {
            w_id: self.cfg.home_w_id,
            carrier_id: self.rng.uniform(1, 10) as u8,
            delivery_d: now.max(1),
            districts: self.cfg.scale.districts_per_warehouse,
        }
    }

    fn stock_level(&mut self) -> stock_level::Input {
        stock_level::Input {
            w_id: self.cfg.home_w_id,
            d_id: self.cfg.stock_level_d_id,
            threshold: self.rng.uniform(10, 20),
        }
    }
}
