// Drover router: how a client or gateway chooses an endpoint.
//
// Data flow: a single writer (the discovery client or the gateway's control thread) turns the
// current endpoint list into an immutable RouterSnapshot -- the versioned RoutingTable plus the
// pickers built from it (ring, Maglev, P2C) -- and publishes it through Published<T>. Any number
// of data-path threads Load() the snapshot once per request and pick on it; a load never waits for
// a build, only (at worst) for one pointer swap. A reader keeps its snapshot alive for as long as
// it needs it, even while newer ones are published. Picks return an index into the snapshot's
// endpoint vector.
//
// Key-affine routing (RT-4): RingHash and Maglev map a key's 64-bit hash to an owner; their
// PickBounded() overlays bounded load (factor c) by walking the algorithm's own successor
// sequence to the first endpoint under its cap. New-connection routing (RT-3): P2cPicker, power
// of two choices least-connections with slow start. ModN (hash % n) exists only as the baseline
// benchmarks compare against. Hot-key detection and spreading (RT-5) live in drover/hot_keys.h.
//
// This header includes every header of drover/router/, one concept each: hash.h (key hashing),
// random.h (RandomSource), routing_table.h (Endpoint, RoutingTable), published.h (Published<T>),
// bounded_load.h (LoadView, BoundedLoadCap), ring_hash.h, maglev.h, mod_n.h, p2c.h (slow start,
// P2cPicker), router.h (RouterSnapshot, Router) and migration.h (KeyMigration: staged moves); code
// that uses one concept can include just its header.
#pragma once

#include "drover/router/bounded_load.h"
#include "drover/router/hash.h"
#include "drover/router/maglev.h"
#include "drover/router/migration.h"
#include "drover/router/mod_n.h"
#include "drover/router/p2c.h"
#include "drover/router/published.h"
#include "drover/router/random.h"
#include "drover/router/ring_hash.h"
#include "drover/router/router.h"
#include "drover/router/routing_table.h"
