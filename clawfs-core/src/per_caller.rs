//! Shares of the daemon's own resources held for callers: descriptors, and bytes of requests
//! and answers kept in its memory, each counted per uid in a [`Ledger`]. An amount taken is a
//! [`Taken`], given back when it is dropped, whatever path the thing it pays for takes (a
//! close, a release, an error, a handle dropped with its table).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// What is held when a caller asks for more.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Holdings {
    /// By the asking uid.
    pub mine: u64,
    /// By every uid together.
    pub all: u64,
    /// By root.
    pub root: u64,
}

#[derive(Default)]
struct Book {
    by_uid: HashMap<u32, u64>,
    all: u64,
}

impl Book {
    fn held_by(&self, uid: u32) -> u64 {
        self.by_uid.get(&uid).copied().unwrap_or(0)
    }

    fn holdings(&self, uid: u32) -> Holdings {
        Holdings {
            mine: self.held_by(uid),
            all: self.all,
            root: self.held_by(0),
        }
    }

    fn add(&mut self, uid: u32, n: u64) {
        if n > 0 {
            *self.by_uid.entry(uid).or_default() += n;
            self.all += n;
        }
    }

    fn sub(&mut self, uid: u32, n: u64) {
        if let Some(held) = self.by_uid.get_mut(&uid) {
            let n = n.min(*held);
            *held -= n;
            self.all -= n;
            if *held == 0 {
                self.by_uid.remove(&uid);
            }
        }
    }
}

/// Amounts held per uid (cheap to clone: every clone counts in the same book).
#[derive(Clone, Default)]
pub struct Ledger(Arc<Mutex<Book>>);

impl Ledger {
    fn book(&self) -> MutexGuard<'_, Book> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `amount` more for `uid` if `allow` consents, given what is held now; held until the
    /// [`Taken`] is dropped. The check and the taking are one step: callers racing for the
    /// last of a limit cannot both pass it.
    pub fn take<E>(
        &self,
        uid: u32,
        amount: u64,
        allow: impl FnOnce(Holdings) -> Result<(), E>,
    ) -> Result<Taken, E> {
        let mut book = self.book();
        allow(book.holdings(uid))?;
        book.add(uid, amount);
        Ok(Taken {
            ledger: self.clone(),
            uid,
            amount,
        })
    }

    /// What `uid` holds now.
    pub fn held_by(&self, uid: u32) -> u64 {
        self.book().held_by(uid)
    }

    /// What every uid holds together now.
    pub fn total(&self) -> u64 {
        self.book().all
    }
}

/// An amount held for one uid in a [`Ledger`]; given back when dropped.
pub struct Taken {
    ledger: Ledger,
    uid: u32,
    amount: u64,
}

impl Taken {
    /// The amount held.
    pub fn amount(&self) -> u64 {
        self.amount
    }

    /// Holds `amount` instead: growing asks `allow` (given what is held now, this amount
    /// included), shrinking always succeeds.
    pub fn resize<E>(
        &mut self,
        amount: u64,
        allow: impl FnOnce(Holdings) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut book = self.ledger.book();
        if amount > self.amount {
            allow(book.holdings(self.uid))?;
            book.add(self.uid, amount - self.amount);
        } else {
            book.sub(self.uid, self.amount - amount);
        }
        self.amount = amount;
        Ok(())
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        self.ledger.book().sub(self.uid, self.amount);
    }
}

impl std::fmt::Debug for Taken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Taken")
            .field("uid", &self.uid)
            .field("amount", &self.amount)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at_most(limit: u64, more: u64) -> impl FnOnce(Holdings) -> Result<(), u64> {
        move |h| match h.mine + more > limit {
            true => Err(h.mine),
            false => Ok(()),
        }
    }

    #[test]
    fn what_is_taken_is_given_back_when_dropped() {
        let ledger = Ledger::default();
        let a = ledger.take(1000, 3, at_most(5, 3)).unwrap();
        let b = ledger.take(1000, 2, at_most(5, 2)).unwrap();
        assert_eq!(ledger.take(1000, 1, at_most(5, 1)).unwrap_err(), 5);
        let _root = ledger.take(0, 7, at_most(10, 7)).unwrap();
        assert_eq!((ledger.held_by(1000), ledger.total()), (5, 12));
        drop(a);
        drop(b);
        assert_eq!((ledger.held_by(1000), ledger.total()), (0, 7));
        assert!(!ledger.book().by_uid.contains_key(&1000));
    }

    #[test]
    fn a_hold_grows_within_its_limit_and_shrinks_freely() {
        let ledger = Ledger::default();
        let mut hold = ledger.take(1000, 0, at_most(10, 0)).unwrap();
        let _other = ledger.take(1000, 4, at_most(10, 4)).unwrap();
        hold.resize(6, at_most(10, 6)).unwrap();
        assert_eq!(hold.resize(7, at_most(10, 1)).unwrap_err(), 10);
        assert_eq!(hold.amount(), 6);
        hold.resize(1, at_most(10, 0)).unwrap();
        assert_eq!(ledger.held_by(1000), 5);
        let root = ledger.take(0, 2, |_| Ok::<(), ()>(())).unwrap();
        assert_eq!(
            ledger.book().holdings(1000),
            Holdings {
                mine: 5,
                all: 7,
                root: 2
            }
        );
        drop((hold, root));
        assert_eq!(ledger.total(), 4);
    }
}
