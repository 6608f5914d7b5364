package cliflag

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// Logger is the logger that --log-level (debug, info, warn or error) and
// --log-format (text or json) ask for, writing to w.
func Logger(level, format string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		return nil, fmt.Errorf("--log-level %s: want debug, info, warn or error", Quote(level))
	}
	o := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, o)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, o)), nil
	}
	return nil, fmt.Errorf("--log-format %s: want text or json", Quote(format))
}
