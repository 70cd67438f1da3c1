package reward

import (
	"strings"
	"testing"
)

func TestConfigValidateDefaults(t *testing.T) {
	for _, c := range []Config{{}, {Kind: KindCommand, Command: []string{"prog"}}, {Kind: KindHTTP, URL: "http://localhost:8000/score"}} {
		if err := c.Validate(); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if c.Kind == "" || c.Timeout != "60s" || c.BatchSize != 64 || c.OnError != OnErrorFail {
			t.Errorf("defaults not filled: %+v", c)
		}
	}
	def := DefaultConfig()
	if err := def.Validate(); err != nil || def.Kind != KindMath || def.Retries != 3 {
		t.Errorf("DefaultConfig: %+v, %v", def, err)
	}
}

func TestConfigValidateErrors(t *testing.T) {
	cmd := func(c Config) Config { c.Kind, c.Command = KindCommand, []string{"prog"}; return c }
	web := func(c Config) Config { c.Kind, c.URL = KindHTTP, "https://example.com/score"; return c }
	for _, tc := range []struct {
		name string
		c    Config
		want string // in the error, with the key
	}{
		{"unknown kind", Config{Kind: "python"}, `config key reward.kind: "python": want math, code, command or http`},
		{"math with command", Config{Command: []string{"prog"}}, "config key reward.command: is set, but reward.kind is math"},
		{"math with url", Config{URL: "http://x"}, "config key reward.url: is set, but reward.kind is math"},
		{"math with token_env", Config{TokenEnv: "TOKEN"}, "config key reward.token_env: is set, but reward.kind is math"},
		{"command missing", Config{Kind: KindCommand}, "config key reward.command: is required with reward.kind: command"},
		{"command empty program", Config{Kind: KindCommand, Command: []string{""}}, "config key reward.command: is required"},
		{"command with url", cmd(Config{URL: "http://x"}), "config key reward.url: is set, but reward.kind is command"},
		{"command with token_env", cmd(Config{TokenEnv: "T"}), "config key reward.token_env: is set, but reward.kind is command"},
		{"http missing url", Config{Kind: KindHTTP}, "config key reward.url: is required with reward.kind: http"},
		{"http bad scheme", Config{Kind: KindHTTP, URL: "ftp://example.com/x"}, `config key reward.url: "ftp://example.com/x": want http(s)://`},
		{"http no host", Config{Kind: KindHTTP, URL: "localhost:8000"}, "config key reward.url:"},
		{"http with command", web(Config{Command: []string{"prog"}}), "config key reward.command: is set, but reward.kind is http"},
		{"token_env not a name", web(Config{TokenEnv: "sk-abc123"}), "config key reward.token_env: want the name of an environment variable"},
		{"timeout unparsable", cmd(Config{Timeout: "soon"}), `config key reward.timeout: "soon": want a duration`},
		{"timeout zero", cmd(Config{Timeout: "0s"}), "config key reward.timeout: must be > 0"},
		{"timeout negative", web(Config{Timeout: "-1s"}), "config key reward.timeout: must be > 0"},
		{"batch_size", cmd(Config{BatchSize: -1}), "config key reward.batch_size: must be ≥ 1"},
		{"retries", web(Config{Retries: -1}), "config key reward.retries: must be ≥ 0"},
		{"on_error", cmd(Config{OnError: "skip"}), `config key reward.on_error: "skip": want fail or zero`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestConfigErrorsHideSecrets(t *testing.T) {
	c := Config{Kind: KindHTTP, URL: "ftp://user:hunter2@example.com/x?key=hunter2"}
	if err := c.Validate(); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("got %v: want an error without the URL's secrets", err)
	}
	c = Config{Kind: KindHTTP, URL: "http://example.com", TokenEnv: "sk-hunter2"}
	if err := c.Validate(); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("got %v: want an error without token_env's value", err)
	}
}

func TestNew(t *testing.T) {
	s, err := New(Config{}, 0.25)
	if m, ok := s.(Math); err != nil || !ok || m.FormatWeight != 0.25 {
		t.Errorf("math: got %#v, %v", s, err)
	}
	for _, tc := range []struct {
		name   string
		c      Config
		weight float64
		want   string
	}{
		{"invalid config", Config{Kind: "python"}, 0, "config key reward.kind"},
		{"format weight with command", Config{Kind: KindCommand, Command: []string{"true"}}, 0.1, "config key algo.format_reward: 0.1 applies to reward.kind: math only"},
		{"format weight with http", Config{Kind: KindHTTP, URL: "http://x"}, 0.1, "config key algo.format_reward"},
		{"program not found", Config{Kind: KindCommand, Command: []string{"/nonexistent/reward-program"}}, 0, "config key reward.command: exec: \"/nonexistent/reward-program\""},
		{"token unset", Config{Kind: KindHTTP, URL: "http://x", TokenEnv: "LANPO_TEST_NO_SUCH_TOKEN"}, 0, "config key reward.token_env: environment variable LANPO_TEST_NO_SUCH_TOKEN is unset or empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.c, tc.weight)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, %v; want an error with %q", s, err, tc.want)
			}
		})
	}
	s, err = New(Config{Kind: KindCommand, Command: []string{"true"}}, 0)
	if _, ok := s.(*Command); err != nil || !ok {
		t.Errorf("command: got %#v, %v", s, err)
	}
	s, err = New(Config{Kind: KindHTTP, URL: "http://x"}, 0)
	if _, ok := s.(*HTTP); err != nil || !ok {
		t.Errorf("http: got %#v, %v", s, err)
	}
}

// TestMathConfigChecksItsKeys: with the default kind a typo in the
// common keys is still an error naming the key.
func TestMathConfigChecksItsKeys(t *testing.T) {
	for key, c := range map[string]Config{
		"reward.on_error": {Kind: KindMath, OnError: "zeroo", Timeout: "60s", BatchSize: 64},
		"reward.timeout":  {Kind: KindMath, OnError: OnErrorFail, Timeout: "x", BatchSize: 64},
	} {
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%+v: %v, want an error naming %s", c, err, key)
		}
	}
}
