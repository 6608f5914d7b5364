package xdp

import (
	"os"
	"testing"

	"github.com/tapfwd/tapfwd/internal/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.Main(m)) }
