// Command fenced-postgres shows fencing tokens at work: every write to
// PostgreSQL carries the token of the lock it was made under, and the
// database refuses a write whose token is older than one it has accepted,
// so a holder frozen past the loss of its lock cannot overwrite its
// successor's work. It plays two workers: A takes the lock and freezes, B
// is granted it and writes with a larger token, and A wakes and writes
// with its old one, which PostgreSQL refuses. It exits 0 when the stale
// write was refused. The recipe: docs/fencing.md, "SQL (PostgreSQL, MySQL,
// SQLite)".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/batonlock/baton"
)

// schema: fence keeps the highest token accepted per resource, next to the
// data it guards (reports).
const schema = `
CREATE TABLE IF NOT EXISTS fence (resource text PRIMARY KEY, max_token bigint NOT NULL);
CREATE TABLE IF NOT EXISTS reports (id bigserial PRIMARY KEY, body text NOT NULL, token bigint NOT NULL);
INSERT INTO fence VALUES ('reports', 0) ON CONFLICT DO NOTHING;`

// errStale means that a holder with a newer token has written: this
// holder lost its lock and must stop.
var errStale = errors.New("stale token: a newer lock holder has written")

// fencedWrite adds a report, fenced with token. The fence row is checked
// and raised in the same transaction as the write, and its row lock orders
// concurrent writers: a write with a token older than the newest accepted
// one is refused. (<= rather than < lets a holder write many times.)
// Tokens are below 2^63, so they fit PostgreSQL's bigint.
func fencedWrite(ctx context.Context, db *pgx.Conn, token uint64, body string) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx,
			`UPDATE fence SET max_token = $1 WHERE resource = 'reports' AND max_token <= $1`, int64(token))
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return errStale // the transaction rolls back
		}
		_, err = tx.Exec(ctx, `INSERT INTO reports (body, token) VALUES ($1, $2)`, body, int64(token))
		return err
	})
}

func main() {
	server := flag.String("server", "127.0.0.1:7070", "baton server address (host:port)")
	dsn := flag.String("db", os.Getenv("DATABASE_URL"), "PostgreSQL connection string; empty: the PG* environment variables")
	name := flag.String("lock", "fenced-postgres-example", "the lock guarding the reports table")
	flag.Parse()
	log.SetFlags(0)
	if err := run(context.Background(), *server, *dsn, *name); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, server, dsn, name string) error {
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer db.Close(ctx)
	if _, err := db.Exec(ctx, schema); err != nil {
		return err
	}
	c := baton.New(baton.Config{Address: server})
	const lease = 2 * time.Second

	// 1. A takes the lock and writes.
	a, err := c.Acquire(ctx, name, lease)
	if err != nil {
		return err
	}
	tokenA := a.Token()
	fmt.Printf("A: holds the lock, token %d\n", tokenA)
	if err := fencedWrite(ctx, db, tokenA, "report by A"); err != nil {
		return fmt.Errorf("A: %w", err)
	}
	fmt.Printf("A: write accepted (token %d)\n", tokenA)

	// 2. A freezes and its claim ends behind its back.
	fmt.Println("A: frozen; meanwhile the server ends its claim")
	a.Release(ctx)

	// 3. B takes the lock and writes. This is the usual shape of guarded
	// work: Do runs the function only while the lock is held.
	err = c.Do(ctx, name, lease, func(ctx context.Context, token uint64) error {
		fmt.Printf("B: holds the lock, token %d\n", token)
		if err := fencedWrite(ctx, db, token, "report by B"); err != nil {
			return err
		}
		fmt.Printf("B: write accepted (token %d)\n", token)
		return nil
	})
	if err != nil {
		return fmt.Errorf("B: %w", err)
	}

	// 4. A wakes up and writes with its old token.
	fmt.Printf("A: wakes up, writes with token %d\n", tokenA)
	err = fencedWrite(ctx, db, tokenA, "late report by A")
	if !errors.Is(err, errStale) {
		return fmt.Errorf("A: the stale write was not refused (%v)", err)
	}
	fmt.Printf("A: write refused: %v\n", err)
	return nil
}
