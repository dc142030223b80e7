// Package ring is baton's cluster ring: the pure function that maps a
// lock name to the node that owns it. Cluster nodes and clients use this
// same code, so a client that learns the ring's members from any node
// (docs/protocol-v2-ring.md, "v2 ring") computes the owner every node computes.
// It imports nothing but the standard library.
package ring

import "slices"

// Ring maps lock names to the node that owns them. It is pure and
// deterministic: the same version and members give the same owner for
// every name on every node, whatever the order the members were listed in.
//
// The ring uses rendezvous (highest random weight) hashing: the owner of a
// name is the member with the highest score hash(name, member). Compared
// with consistent hashing on virtual nodes it needs no virtual-node count
// to tune and no sorted table: balance is that of the hash (within a few
// per cent over 100,000 names, see TestBalance), a join moves exactly
// the names the new member wins (1/N of them in expectation) and a leave
// moves only the leaving member's names. Its cost is one hash of the name
// and one mix per member, which is small for the clusters baton targets
// (3 to 7 nodes; see BenchmarkOwner).
//
// A Ring is immutable once built; share it between goroutines freely.
type Ring struct {
	version uint64
	members []string // sorted
	seeds   []uint64 // hash of each member id, same order
}

// New returns the ring of version over the serving members (node ids).
// Duplicates are ignored.
func New(version uint64, members []string) *Ring {
	ms := slices.Clone(members)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	r := &Ring{version: version, members: ms, seeds: make([]uint64, len(ms))}
	for i, m := range ms {
		r.seeds[i] = hashString(m)
	}
	return r
}

// Version is the ring's version, as committed through Raft; it increases
// with every change of the serving members.
func (r *Ring) Version() uint64 { return r.version }

// Members returns the ring's members, sorted.
func (r *Ring) Members() []string { return slices.Clone(r.members) }

// Len is the number of members.
func (r *Ring) Len() int { return len(r.members) }

// Has reports whether id is a member of the ring.
func (r *Ring) Has(id string) bool {
	_, ok := slices.BinarySearch(r.members, id)
	return ok
}

// Owner returns the id of the member that owns name, or "" for an empty
// ring.
func (r *Ring) Owner(name string) string {
	i := r.ownerIndex(hashString(name))
	if i < 0 {
		return ""
	}
	return r.members[i]
}

func (r *Ring) ownerIndex(h uint64) int {
	best, bestScore := -1, uint64(0)
	for i, s := range r.seeds {
		if sc := mix64(h ^ s); best < 0 || sc > bestScore {
			best, bestScore = i, sc
		}
	}
	return best
}

// hashString is 64-bit FNV-1a, inlined so that Owner does not allocate.
func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return mix64(h)
}

// mix64 is the splitmix64 finalizer: a bijection that spreads every input
// bit over the output, so that the scores of one name for different
// members are independent enough for rendezvous hashing.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
