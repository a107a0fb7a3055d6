//! [`Object`]: exclusive use of one pooled object, returned to the pool on drop.

use std::fmt;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};

use super::{Manager, Meta, Pooled, Shared, Step};
use crate::panic::catch;
use crate::protocol::exclusive::Lease;
use crate::sync::Arc;

/// Exclusive use of one object of a [`Pool`](super::Pool). Owned (`'static`): it can move into
/// a spawned task, and it keeps the pool's state alive (not the pool handle: dropping the last
/// handle closes the pool, and this object is dropped when it comes back). Derefs to the
/// object; on drop the object goes back to the pool (to the oldest waiter, if any), or is
/// dropped if it is past its lifetime or the pool shrank or closed.
#[must_use = "dropping the object returns it to the pool at once"]
pub struct Object<M: Manager> {
    /// The slot and the object (one `Option`: a return takes both with one write). `None`
    /// only once returned or taken. `ManuallyDrop`: the drop below always empties it, so the
    /// field has no drop of its own to run (and test) after it.
    held: ManuallyDrop<Option<(Lease, Pooled<M>)>>,
}

impl<M: Manager> Object<M> {
    #[inline]
    pub(super) fn new(lease: Lease, pooled: Pooled<M>) -> Self {
        Object {
            held: ManuallyDrop::new(Some((lease, pooled))),
        }
    }

    /// The object's pool entry while it holds one (during its recycle).
    #[inline]
    pub(super) fn pooled_mut(&mut self) -> Option<&mut Pooled<M>> {
        self.held.as_mut().map(|(_, pooled)| pooled)
    }

    /// The object's slot lease while it holds one.
    #[inline]
    pub(super) fn lease(&self) -> Option<&Lease> {
        self.held.as_ref().map(|(lease, _)| lease)
    }

    /// Empties the object without returning it (the pool drops what comes back).
    #[inline]
    pub(super) fn take_held(&mut self) -> Option<(Lease, Pooled<M>)> {
        self.held.take()
    }

    fn pooled(&self) -> &Pooled<M> {
        match &*self.held {
            Some((_, pooled)) => pooled,
            None => unreachable!("an object holds its value until dropped or taken"),
        }
    }

    /// The pool the object came from (deadpool's `Object::pool`): a new handle, or `None`
    /// once every handle of the pool was dropped (the pool is closed, and the object is
    /// dropped when it comes back).
    pub fn pool(this: &Self) -> Option<super::Pool<M>> {
        let handle = this.pooled().anchor.shared.handle.upgrade()?;
        Some(super::Pool { handle })
    }

    /// Takes the object out of the pool for good: the pool calls [`Manager::detach`], frees
    /// its room (a waiter may create another), and hands it over.
    pub fn take(mut this: Self) -> M::Type {
        let Some((lease, pooled)) = this.held.take() else {
            unreachable!("an object holds its value until dropped or taken")
        };
        let (mut object, anchor) = pooled.into_parts();
        let shared = &anchor.shared;
        if let Some(watch) = &shared.hold {
            watch.ended(&shared.slots, lease.index(), shared.time.now());
        }
        if let Err(panic) = catch(|| shared.manager.detach(&mut object)) {
            shared.panicked(Step::Detach, &panic);
        }
        shared.slots.retire(lease);
        shared.counters.detached.incr();
        if shared.config.min_idle > 0 {
            shared.maintain.notify_one();
        }
        object
    }

    /// What the pool knows about the object (creation, last return, recycles).
    pub fn meta(this: &Self) -> Meta {
        let pooled = this.pooled();
        pooled.anchor.shared.meta(pooled.stamps())
    }

    /// The object's slot (lower slots are reused first; for logs).
    pub fn slot(this: &Self) -> usize {
        this.held
            .as_ref()
            .map_or(usize::MAX, |(lease, _)| lease.index())
    }
}

impl<M: Manager> Deref for Object<M> {
    type Target = M::Type;

    #[inline]
    fn deref(&self) -> &M::Type {
        &self.pooled().object
    }
}

impl<M: Manager> DerefMut for Object<M> {
    #[inline]
    fn deref_mut(&mut self) -> &mut M::Type {
        match &mut *self.held {
            Some((_, pooled)) => pooled.object_mut(),
            None => unreachable!("an object holds its value until dropped or taken"),
        }
    }
}

impl<M: Manager> AsRef<M::Type> for Object<M> {
    fn as_ref(&self) -> &M::Type {
        self
    }
}

impl<M: Manager> AsMut<M::Type> for Object<M> {
    fn as_mut(&mut self) -> &mut M::Type {
        self
    }
}

impl<M: Manager> Drop for Object<M> {
    #[inline]
    fn drop(&mut self) {
        let Some((lease, pooled)) = self.held.take() else {
            return;
        };
        // No reference count of our own: the object keeps the pool alive until the return
        // ends (the slot's `settling` flag; see `exclusive`, "Returning without a reference
        // count").
        let shared: *const Shared<M> = Arc::as_ptr(&pooled.anchor.shared);
        // SAFETY: the object's anchor, and so the pool, is alive until the return ends.
        let ending = unsafe { &*shared }.check_in(lease, pooled);
        // SAFETY: `check_in` has returned; nothing here touches the pool after this.
        unsafe { ending.end() };
    }
}

impl<M: Manager> fmt::Debug for Object<M>
where
    M::Type: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Object")
            .field("slot", &Object::slot(self))
            .field("object", &self.held.as_ref().map(|(_, p)| &p.object))
            .finish()
    }
}
