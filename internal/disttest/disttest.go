// Package disttest decides what a test does in a build without distributed
// support: it skips, unless LANPO_REQUIRE_DIST is set (make test sets it, so
// a build that lost Gloo fails CI instead of skipping its multi-process
// tests).
package disttest

import (
	"os"
	"testing"
)

// Need skips or fails t when gloo is false; why says what the build lacks.
func Need(t testing.TB, gloo bool, why string) {
	t.Helper()
	if gloo {
		return
	}
	if os.Getenv("LANPO_REQUIRE_DIST") != "" {
		t.Fatalf("LANPO_REQUIRE_DIST is set and this build has no distributed support: %s", why)
	}
	t.Skip("no distributed support in this build: " + why)
}
