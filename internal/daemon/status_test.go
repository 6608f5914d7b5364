package daemon

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestFetchStatus reads a daemon's /status, and refuses what is not one.
func TestFetchStatus(t *testing.T) {
	body := `{"schema":"` + StatusSchema + `","tap":{"name":"lab0"},"nic":"w1"}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/status":
			w.Write([]byte(body))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	st, raw, err := FetchStatus(addr)
	if err != nil || st.TAP.Name != "lab0" || st.NIC != "w1" || string(raw) != body {
		t.Errorf("FetchStatus: %+v, %q, %v", st, raw, err)
	}
	body = `{"schema":"something/2"}`
	if _, _, err := FetchStatus(addr); err == nil || !strings.Contains(err.Error(), `is not a tapfwd status of schema `+StatusSchema+` (it has "something/2")`) {
		t.Errorf("another schema: %v", err)
	}
	body = "not json"
	if _, _, err := FetchStatus(addr); err == nil || !strings.Contains(err.Error(), `(it has "")`) {
		t.Errorf("not JSON: %v", err)
	}
	srv.Close()
	_, _, err = FetchStatus(addr)
	if !errors.Is(err, ErrNoStatus) || err.Error() != "no tapfwd answers at "+addr+": connect: connection refused" {
		t.Errorf("nothing listening: %v, want ErrNoStatus and the refusal alone", err)
	}
}
