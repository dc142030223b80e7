package ops

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// LogLevels and LogFormats are the accepted values of NewLogger's level
// and format, in the order the documentation lists them.
var (
	LogLevels  = []string{"debug", "info", "warn", "error"}
	LogFormats = []string{"text", "json"}
)

// ParseLogLevel returns the slog level named by s (debug, info, warn or
// error).
func ParseLogLevel(s string) (slog.Level, error) {
	switch s {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("unknown log level %q (want one of %s)", s, strings.Join(LogLevels, ", "))
}

// NewLogger returns a structured logger writing to w at level in format
// (text or json), with timestamps in UTC.
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	lvl, err := ParseLogLevel(level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: lvl, ReplaceAttr: utcTime}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("unknown log format %q (want one of %s)", format, strings.Join(LogFormats, ", "))
}

// utcTime puts the record's timestamp in UTC, so logs from hosts in
// different zones sort and compare as they are.
func utcTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey && a.Value.Kind() == slog.KindTime {
		a.Value = slog.TimeValue(a.Value.Time().UTC())
	}
	return a
}
