//! Speculation (Correctables, DESIGN §7): start dependent work on a
//! preliminary view, and redo it only if the final view turns out
//! different.

use crate::correctable::{Correctable, Event, Feeder};
use crate::view::{Outcome, View, ViewKind};

impl Correctable {
    /// Run `f` on each new view and return a Correctable of its results.
    ///
    /// `f` runs on the first view, and again on any later view whose
    /// outcome differs from the one it last ran on. The returned
    /// Correctable gets a preliminary view with each speculative result;
    /// when the final view equals (value-wise) the one `f` last ran on, it
    /// closes with a [`ViewKind::Confirmed`] view carrying `f`'s earlier
    /// result, without running `f` again; otherwise with a
    /// [`ViewKind::Final`] view of `f` rerun on the final view. An error of
    /// this Correctable closes the returned one with the same error.
    ///
    /// `f` runs in the task delivering this Correctable's views (see the
    /// module notes on callbacks); it must not block.
    pub fn speculate<F>(&self, f: F) -> Correctable
    where
        F: FnMut(&View) -> Outcome + Send + 'static,
    {
        self.speculate_inner(f, None::<fn(&Outcome)>)
    }

    /// Like [`Correctable::speculate`], and call `abort` with each
    /// speculative result that turned out wrong: before `f` reruns on a
    /// differing view, and when this Correctable fails after `f` ran.
    pub fn speculate_with_abort<F, A>(&self, f: F, abort: A) -> Correctable
    where
        F: FnMut(&View) -> Outcome + Send + 'static,
        A: FnMut(&Outcome) + Send + 'static,
    {
        self.speculate_inner(f, Some(abort))
    }

    fn speculate_inner<F, A>(&self, f: F, abort: Option<A>) -> Correctable
    where
        F: FnMut(&View) -> Outcome + Send + 'static,
        A: FnMut(&Outcome) + Send + 'static,
    {
        let (derived, correctable) = Correctable::channel();
        let mut s = Speculation {
            f,
            abort,
            derived,
            ran_on: None,
        };
        self.observe(Box::new(move |event| s.on_event(event)));
        correctable
    }
}

struct Speculation<F, A> {
    f: F,
    abort: Option<A>,
    derived: Feeder,
    /// The outcome `f` last ran on, and what it returned.
    ran_on: Option<(Outcome, Outcome)>,
}

impl<F, A> Speculation<F, A>
where
    F: FnMut(&View) -> Outcome,
    A: FnMut(&Outcome),
{
    fn on_event(&mut self, event: Event<'_>) {
        if !self.derived.is_open() {
            return;
        }
        match event {
            Event::View { view, closes } => self.on_view(view, closes),
            Event::Error(e) => {
                self.abort_last();
                self.derived.fail(e.clone());
            }
        }
    }

    fn on_view(&mut self, view: &View, closes: bool) {
        match &self.ran_on {
            Some((input, result)) if *input == view.outcome => {
                // The speculation holds. A repeated preliminary outcome
                // tells the derived Correctable nothing new.
                if closes {
                    let kind = if view.kind.is_stable() {
                        ViewKind::Confirmed
                    } else {
                        view.kind
                    };
                    let outcome = result.clone();
                    self.derived.view(derive(view, kind, outcome), true);
                }
            }
            _ => {
                self.abort_last();
                let result = (self.f)(view);
                self.ran_on = Some((view.outcome.clone(), result.clone()));
                // A view that was confirmed but that `f` did not run on
                // (cannot happen: confirmed equals the last preliminary,
                // which `f` ran on) is reported as final.
                let kind = match view.kind {
                    ViewKind::Confirmed => ViewKind::Final,
                    k => k,
                };
                self.derived.view(derive(view, kind, result), closes);
            }
        }
    }

    /// Tell `abort` the last speculative result is wrong.
    fn abort_last(&mut self) {
        if let (Some((_, result)), Some(abort)) = (self.ran_on.take(), self.abort.as_mut()) {
            abort(&result);
        }
    }
}

fn derive(source: &View, kind: ViewKind, outcome: Outcome) -> View {
    View {
        level: source.level,
        kind,
        outcome,
        latency: source.latency,
        across_shards: source.across_shards && kind == ViewKind::Preliminary,
        time: source.time,
    }
}
