//go:build unix

package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/batonlock/baton/examples/internal/exampletest"
	"github.com/batonlock/baton/internal/pgtest"
)

// The test runs this test binary as the program: with
// FENCED_POSTGRES_MAIN=1 it is main (built with the race detector, too).
func TestMain(m *testing.M) {
	if os.Getenv("FENCED_POSTGRES_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestFencing runs against one private PostgreSQL server, a database per
// subtest.
func TestFencing(t *testing.T) {
	pg := pgtest.New(t)
	t.Run("program", func(t *testing.T) { testProgram(t, database(t, pg, "program")) })
	t.Run("fencedWrite", func(t *testing.T) { testFencedWrite(t, database(t, pg, "fencedwrite")) })
	t.Run("concurrent", func(t *testing.T) { testConcurrent(t, database(t, pg, "concurrent")) })
}

// database creates a database and returns a connection string for it.
func database(t *testing.T, pg *pgtest.Server, name string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.DSN)
	if err != nil {
		t.Fatalf("%v\n%s", err, pg.Log())
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	return strings.Replace(pg.DSN, "dbname=postgres", "dbname="+name, 1)
}

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	return conn
}

type report struct {
	body  string
	token uint64
}

// reports returns the reports table in insertion order, and the fence.
func reports(t *testing.T, db *pgx.Conn) ([]report, uint64) {
	t.Helper()
	ctx := context.Background()
	rows, err := db.Query(ctx, `SELECT body, token FROM reports ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var out []report
	for rows.Next() {
		var r report
		var token int64
		if err := rows.Scan(&r.body, &token); err != nil {
			t.Fatal(err)
		}
		r.token = uint64(token)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var max int64
	if err := db.QueryRow(ctx, `SELECT max_token FROM fence WHERE resource = 'reports'`).Scan(&max); err != nil {
		t.Fatal(err)
	}
	return out, uint64(max)
}

var (
	holdsLine   = regexp.MustCompile(`^([AB]): holds the lock, token (\d+)$`)
	refusedLine = regexp.MustCompile(`^A: write refused: stale token`)
)

// testProgram runs the program twice against a real server and database:
// each run's stale write is refused, and only the two fenced reports of
// each run are in the table.
func testProgram(t *testing.T, dsn string) {
	_, addr := exampletest.StartServer(t)
	var want []report
	for run := 1; run <= 2; run++ {
		cmd := exec.Command(os.Args[0], "-server", addr, "-db", dsn)
		cmd.Env = exampletest.Env("FENCED_POSTGRES_MAIN=1")
		p := exampletest.Start(t, "fenced-postgres", cmd)
		tokens := map[string]uint64{}
		for range 2 {
			m := p.Line(t, holdsLine)
			tokens[m[1]], _ = strconv.ParseUint(m[2], 10, 64)
		}
		p.Line(t, refusedLine)
		if code := p.Wait(t); code != 0 {
			t.Fatalf("run %d exited %d, want 0:\n%s", run, code, p.Output())
		}
		if len(want) > 0 && tokens["A"] <= want[len(want)-1].token {
			t.Errorf("run %d: A's token %d is not larger than the last run's %d", run, tokens["A"], want[len(want)-1].token)
		}
		if tokens["B"] <= tokens["A"] {
			t.Errorf("run %d: B's token %d is not larger than A's %d", run, tokens["B"], tokens["A"])
		}
		want = append(want, report{"report by A", tokens["A"]}, report{"report by B", tokens["B"]})
	}
	got, max := reports(t, connect(t, dsn))
	if !slicesEqual(got, want) {
		t.Errorf("reports = %v, want %v (the late write must not be there)", got, want)
	}
	if max != want[len(want)-1].token {
		t.Errorf("fence max_token = %d, want the last accepted token %d", max, want[len(want)-1].token)
	}
}

func slicesEqual(a, b []report) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// testFencedWrite pins the fence's rule: the same token may write again,
// a newer one may write, an older one is refused and writes nothing.
func testFencedWrite(t *testing.T, dsn string) {
	db := connect(t, dsn)
	ctx := context.Background()
	if _, err := db.Exec(ctx, schema); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		token uint64
		stale bool
	}{{10, false}, {10, false}, {9, true}, {11, false}, {10, true}, {1 << 62, false}}
	var want []report
	for i, s := range steps {
		body := strconv.Itoa(i)
		err := fencedWrite(ctx, db, s.token, body)
		switch {
		case s.stale && !errors.Is(err, errStale):
			t.Errorf("write %d with token %d: %v, want errStale", i, s.token, err)
		case !s.stale && err != nil:
			t.Errorf("write %d with token %d: %v, want success", i, s.token, err)
		case !s.stale:
			want = append(want, report{body, s.token})
		}
	}
	got, max := reports(t, db)
	if !slicesEqual(got, want) || max != 1<<62 {
		t.Errorf("reports = %v, fence %d; want %v, fence %d", got, max, want, uint64(1<<62))
	}
}

// testConcurrent: holders with different tokens (writer w has token
// w+1, as if each had held the lock in turn and not noticed losing it)
// race, each on its own connection. Whatever the interleaving, the
// accepted writes are in token order, and only tokens below the highest
// accepted one are refused.
func testConcurrent(t *testing.T, dsn string) {
	ctx, cancel := context.WithTimeout(context.Background(), exampletest.Timeout)
	defer cancel()
	if _, err := connect(t, dsn).Exec(ctx, schema); err != nil {
		t.Fatal(err)
	}
	const writers, writes = 6, 15
	var wg sync.WaitGroup
	var mu sync.Mutex
	refused := map[uint64]int{}
	errs := make(chan error, writers)
	for w := range writers {
		db := connect(t, dsn)
		wg.Go(func() {
			token := uint64(w + 1)
			for i := range writes {
				switch err := fencedWrite(ctx, db, token, strconv.Itoa(w*writes+i)); {
				case errors.Is(err, errStale):
					mu.Lock()
					refused[token]++
					mu.Unlock()
				case err != nil:
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, max := reports(t, connect(t, dsn))
	n := 0
	for _, c := range refused {
		n += c
	}
	if len(got)+n != writers*writes {
		t.Fatalf("%d accepted + %d refused writes, want %d", len(got), n, writers*writes)
	}
	for i := 1; i < len(got); i++ {
		if got[i].token < got[i-1].token {
			t.Fatalf("accepted write %d has token %d after %d: the fence let an older token through", i, got[i].token, got[i-1].token)
		}
	}
	if len(got) == 0 || max != got[len(got)-1].token {
		t.Fatalf("fence max_token %d, last accepted %v", max, got)
	}
	for token := range refused {
		if token >= max {
			t.Errorf("token %d was refused, though it is not below the highest accepted %d", token, max)
		}
	}
	t.Logf("%d writes accepted, %d refused", len(got), n)
}
