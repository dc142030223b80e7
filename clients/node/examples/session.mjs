// One session, many claims: exclusive, shared and semaphore locks, a
// claim that does not wait, one with a timeout, and the loss signal.
import { Client, BusyError } from '../src/index.js';

const client = new Client({ address: process.env.BATON_ADDR ?? '127.0.0.1:7070' });
const session = await client.openSession({ lease: 5000, label: 'example' });

// Many readers at once; a writer waits for them and is never overtaken.
const reader = await session.acquire('orders', { mode: 'shared' });
console.log('reading orders, token', reader.token);
await reader.release();

// At most two holders of "gpu" at a time, fleet-wide.
const gpu = await session.acquire('gpu', { mode: 'semaphore', limit: 2 });

// Don't wait if someone holds it.
try {
  const cl = await session.tryAcquire('migrations');
  await cl.release();
} catch (err) {
  if (!(err instanceof BusyError)) throw err;
  console.log('migrations is busy');
}

// Wait at most two seconds in the queue.
const report = await session.acquire('report', { timeout: 2000 });

// The work learns of a loss through the claim's signal or its 'lost' event.
report.on('lost', (err) => console.error('report lock lost:', err.message));
report.signal.addEventListener('abort', () => console.log('stop the report work:', report.signal.reason.message));

await report.release();
await gpu.release();
await session.close();
