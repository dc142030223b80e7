// The owner of a lock name in a cluster: rendezvous hashing, exactly as
// the nodes compute it (docs/protocol-v2-ring.md, "v2 ring"; Go package
// cluster/ring). All arithmetic is on unsigned 64-bit integers.

const M64 = (1n << 64n) - 1n;

/** @param {bigint} x */
function mix64(x) {
  x ^= x >> 30n;
  x = (x * 0xbf58476d1ce4e5b9n) & M64;
  x ^= x >> 27n;
  x = (x * 0x94d049bb133111ebn) & M64;
  x ^= x >> 31n;
  return x;
}

/** @param {string} s */
export function hashString(s) {
  let h = 14695981039346656037n;
  for (const byte of Buffer.from(s, 'utf8')) {
    h ^= BigInt(byte);
    h = (h * 1099511628211n) & M64;
  }
  return mix64(h);
}

/**
 * The id of the in-ring member owning name, or '' for an empty ring. Of
 * two equal scores the id that sorts first (bytewise) wins.
 * @param {string} name
 * @param {string[]} members ids of the in-ring members
 */
export function ownerOf(name, members) {
  const ids = [...new Set(members)].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  const h = hashString(name);
  let best = '';
  let bestScore = -1n;
  for (const id of ids) {
    const sc = mix64(h ^ hashString(id));
    if (sc > bestScore) {
      best = id;
      bestScore = sc;
    }
  }
  return best;
}
