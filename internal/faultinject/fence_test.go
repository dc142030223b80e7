//go:build linux

package faultinject_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/batonlock/baton/internal/faultinject"
	"github.com/batonlock/baton/internal/pgtest"
)

// TestFenceSQL drives the suite's fence statements in PostgreSQL through
// the rules of docs/protocol-v2-client.md ("v2 fencing with several holders"): a
// write is accepted only if its token is at least M, a read only if its
// token is above W; readers do not refuse each other. The mutant without
// the W rule must accept the stale read, so the suite's mutant run tests
// what it says.
func TestFenceSQL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL; not with -short")
	}
	pg := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := fenceDB(ctx, t, pg.DSN)
	type op struct {
		read bool
		tok  int64
		ok   bool
		why  string
	}
	run := func(resource, mutation string, ops []op) {
		t.Helper()
		if _, err := db.Exec(ctx, `INSERT INTO fence VALUES ($1, 0, 0)`, resource); err != nil {
			t.Fatal(err)
		}
		for i, o := range ops {
			sql := faultinject.WriteSQL
			if o.read {
				sql = faultinject.ReadSQLFor(mutation)
			}
			var seq int64
			err := db.QueryRow(ctx, sql, o.tok, resource, "w").Scan(&seq)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				t.Fatal(err)
			}
			if ok := err == nil; ok != o.ok {
				t.Errorf("%s %s: step %d, read %v token %d: accepted %v, want %v (%s)", resource, mutation, i+1, o.read, o.tok, ok, o.ok, o.why)
			}
		}
	}
	run("r", "", []op{
		{false, 10, true, "first write"},
		{true, 12, true, "a reader after the writer"},
		{true, 11, true, "a concurrent reader with a lower token: readers do not refuse each other"},
		{false, 11, false, "a writer older than an accepted read (M)"},
		{false, 13, true, "a newer writer"},
		{false, 13, true, "the same writer again"},
		{true, 12, false, "a reader older than the last accepted writer (W)"},
		{true, 14, true, "a newer reader"},
	})
	var m, w, n, logged int64
	if err := db.QueryRow(ctx, `SELECT max_token, write_token, writes, (SELECT count(*) FROM fence_log) FROM fence WHERE resource = 'r'`).Scan(&m, &w, &n, &logged); err != nil {
		t.Fatal(err)
	}
	if m != 14 || w != 13 || n != 6 || logged != 6 {
		t.Errorf("fence row M %d, W %d, writes %d, fence_log %d rows; want 14, 13, 6, 6", m, w, n, logged)
	}
	// fence_log numbers one resource's operations.
	if _, err := db.Exec(ctx, `TRUNCATE fence_log`); err != nil {
		t.Fatal(err)
	}
	run("mutant", faultinject.MutationNoWRule, []op{
		{false, 13, true, "a writer"},
		{true, 12, true, "without the W rule the stale reader gets in"},
	})
}

// fenceDB connects to the private PostgreSQL at dsn, closed when the test
// ends, and creates the fence's tables.
func fenceDB(ctx context.Context, t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	if _, err := db.Exec(ctx, faultinject.SchemaSQL); err != nil {
		t.Fatal(err)
	}
	return db
}

// readFence returns what the database holds at the end of a run: the
// fence row's count of accepted operations on lock, and fence_log.
func readFence(ctx context.Context, t *testing.T, db *pgx.Conn, lock string) (int64, []faultinject.DBWrite) {
	t.Helper()
	var writes int64
	if err := db.QueryRow(ctx, `SELECT writes FROM fence WHERE resource = $1`, lock).Scan(&writes); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Query(ctx, `SELECT seq, token, worker, shared FROM fence_log ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	log, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (faultinject.DBWrite, error) {
		var w faultinject.DBWrite
		var tok int64
		err := row.Scan(&w.Seq, &tok, &w.Worker, &w.Shared)
		w.Token = uint64(tok)
		return w, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return writes, log
}
