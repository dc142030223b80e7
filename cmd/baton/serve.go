package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/batonlock/baton/server"
)

// serveConfig is everything 'baton serve' reads from flags and env.
type serveConfig struct {
	listen    string
	ioTimeout time.Duration
}

func serveFlags(stderr io.Writer) (*flagSet, *serveConfig) {
	cfg := &serveConfig{}
	fs := newFlagSet("baton serve", "baton serve [flags]", stderr)
	fs.StringVar(&cfg.listen, "listen", "BATON_LISTEN_ADDRESS", server.DefaultAddr, "protocol address to listen on (host:port)")
	fs.DurationVar(&cfg.ioTimeout, "io-timeout", "BATON_IO_TIMEOUT", server.DefaultIOTimeout, "bound on the handshake and first ACQUIRE, a started frame, and every write")
	return fs, cfg
}

func (c *serveConfig) validate() error {
	if c.ioTimeout <= 0 {
		return fmt.Errorf("-io-timeout must be positive, got %v", c.ioTimeout)
	}
	if _, _, err := net.SplitHostPort(c.listen); err != nil {
		return fmt.Errorf("-listen %q: %v", c.listen, err)
	}
	return nil
}

func runServe(args []string, stdout, stderr io.Writer) int {
	fs, cfg := serveFlags(stderr)
	if code := fs.parseOrExit(args, stdout, stderr); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "baton serve: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintf(stderr, "baton serve: %v\n", err)
		return exitUsage
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))

	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		logger.Error("cannot listen", "addr", cfg.listen, "err", err)
		return exitError
	}
	srv := &server.Server{IOTimeout: cfg.ioTimeout, Logger: logger}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	logger.Info("baton listening", "addr", ln.Addr().String(), "version", version, "io_timeout", cfg.ioTimeout)

	select {
	case err := <-serveErr:
		logger.Error("server stopped", "err", err)
		return exitError
	case <-ctx.Done():
	}
	stop() // a second signal kills the process the default way
	logger.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*cfg.ioTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		logger.Error("shutdown", "err", err)
		return exitError
	}
	<-serveErr
	logger.Info("stopped")
	return exitOK
}
