package deploy

import (
	"os"
	"testing"

	"github.com/tapfwd/tapfwd/internal/testkit"
)

// TestMain removes the tapfwd binary the tests built.
func TestMain(m *testing.M) { os.Exit(testkit.Main(m)) }
