package reward

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"
)

// Config is the reward: section of a run's config (YAML keys as tagged).
// The math verifier is the default; command and http score with the
// user's own reward (Command, HTTP; the protocol is in Command's doc).
type Config struct {
	Kind      string   `yaml:"kind"`       // math (default), code, command, http
	Command   []string `yaml:"command"`    // command: the program and its arguments (argv; never through a shell)
	URL       string   `yaml:"url"`        // http: where batches are POSTed
	TokenEnv  string   `yaml:"token_env"`  // http: the environment variable holding a bearer token (the token itself is never in the config)
	Timeout   string   `yaml:"timeout"`    // per request (a batch; for http each try): a duration, default "60s"
	BatchSize int      `yaml:"batch_size"` // rollouts per request, default 64
	Retries   int      `yaml:"retries"`    // http: retries after the first try, with exponential backoff (default 3)
	OnError   string   `yaml:"on_error"`   // fail (default): a failure stops the step naming the program's or server's error; zero: the failed rollouts score 0, Verdict.Err set, counted by the caller
	// code: how candidates are isolated (namespaces, the default, or none:
	// no isolation, only limits; never chosen for the user) and their
	// limits.
	Sandbox string     `yaml:"sandbox"`
	Code    CodeConfig `yaml:"code"`
}

// Reward kinds and failure policies (Config.Kind, Config.OnError).
const (
	KindMath    = "math"
	KindCode    = "code"
	KindCommand = "command"
	KindHTTP    = "http"

	OnErrorFail = "fail"
	OnErrorZero = "zero"
)

// DefaultConfig is what unset keys mean.
func DefaultConfig() Config {
	return Config{Kind: KindMath, Timeout: "60s", BatchSize: 64, Retries: 3, OnError: OnErrorFail}
}

// envName is what token_env must look like: a variable's name. Refusing
// anything else keeps a token pasted there by mistake out of the errors
// that name the variable.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate fills the defaults of empty keys (kind, timeout, on_error, and
// batch_size 0) and checks the section, naming the bad key. Retries keeps
// its value: 0 is a valid setting, so its default of 3 comes from
// DefaultConfig, which a run's config is decoded over.
func (c *Config) Validate() error {
	bad := func(key string, format string, args ...any) error {
		return fmt.Errorf("config key reward.%s: %s", key, fmt.Sprintf(format, args...))
	}
	def := DefaultConfig()
	if c.Kind == "" {
		c.Kind = def.Kind
	}
	if c.Timeout == "" {
		c.Timeout = def.Timeout
	}
	if c.BatchSize == 0 {
		c.BatchSize = def.BatchSize
	}
	if c.OnError == "" {
		c.OnError = def.OnError
	}

	// Keys of another kind are mistakes: say which kind reads them.
	if c.Kind != KindCode {
		switch {
		case c.Sandbox != "":
			return bad("sandbox", "is set, but reward.kind is %s: it belongs to reward.kind: code", c.Kind)
		case c.Code != (CodeConfig{}):
			return bad("code", "is set, but reward.kind is %s: it belongs to reward.kind: code", c.Kind)
		}
	}
	switch c.Kind {
	case KindMath:
		switch {
		case len(c.Command) > 0:
			return bad("command", "is set, but reward.kind is math (the default): set reward.kind: command to run it")
		case c.URL != "":
			return bad("url", "is set, but reward.kind is math (the default): set reward.kind: http to use it")
		case c.TokenEnv != "":
			return bad("token_env", "is set, but reward.kind is math (the default): it belongs to reward.kind: http")
		}
		// The math verifier reads none of the other keys, but a typo in
		// them is still one (checked below).
	case KindCode:
		switch {
		case len(c.Command) > 0:
			return bad("command", "is set, but reward.kind is code: it belongs to reward.kind: command")
		case c.URL != "" || c.TokenEnv != "":
			return bad("url", "is set, but reward.kind is code: it belongs to reward.kind: http")
		}
		if c.Sandbox == "" {
			c.Sandbox = SandboxNamespaces
		}
		if c.Sandbox != SandboxNamespaces && c.Sandbox != SandboxNone {
			return bad("sandbox", "%q: want %s (the default) or %s (no isolation: only for code you trust)", c.Sandbox, SandboxNamespaces, SandboxNone)
		}
		if err := c.Code.validate(bad); err != nil {
			return err
		}
	case KindCommand:
		switch {
		case len(c.Command) == 0 || c.Command[0] == "":
			return bad("command", "is required with reward.kind: command (the program and its arguments, e.g. [python3, my_reward.py])")
		case c.URL != "":
			return bad("url", "is set, but reward.kind is command: it belongs to reward.kind: http")
		case c.TokenEnv != "":
			return bad("token_env", "is set, but reward.kind is command: it belongs to reward.kind: http")
		}
	case KindHTTP:
		if len(c.Command) > 0 {
			return bad("command", "is set, but reward.kind is http: it belongs to reward.kind: command")
		}
		if c.URL == "" {
			return bad("url", "is required with reward.kind: http (where batches are POSTed, http(s)://host/path)")
		}
		u, err := url.Parse(c.URL)
		if err != nil {
			return bad("url", "does not parse as a URL: want http(s)://host/path")
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return bad("url", "%q: want http(s)://host/path", redactURL(c.URL))
		}
		if c.TokenEnv != "" && !envName.MatchString(c.TokenEnv) {
			// The value is not repeated: it may be the token itself.
			return bad("token_env", "want the name of an environment variable (letters, digits and _) that holds the token, not the token")
		}
	default:
		return bad("kind", "%q: want %s, %s, %s or %s", c.Kind, KindMath, KindCode, KindCommand, KindHTTP)
	}

	d, err := time.ParseDuration(c.Timeout)
	switch {
	case err != nil:
		return bad("timeout", "%q: want a duration such as 60s or 2m", c.Timeout)
	case d <= 0:
		return bad("timeout", "must be > 0, got %s", c.Timeout)
	case c.BatchSize < 1:
		return bad("batch_size", "must be ≥ 1 (0: %d), got %d", def.BatchSize, c.BatchSize)
	case c.Retries < 0:
		return bad("retries", "must be ≥ 0, got %d", c.Retries)
	case c.OnError != OnErrorFail && c.OnError != OnErrorZero:
		return bad("on_error", "%q: want %s or %s", c.OnError, OnErrorFail, OnErrorZero)
	}
	return nil
}

// Describe names the reward for records that must not mix two: "" for
// math, else the kind and its program or server (the URL without user
// information or query).
func (c Config) Describe() string {
	switch c.Kind {
	case KindCode:
		return KindCode + " (sandbox " + c.Sandbox + ")"
	case KindCommand:
		return KindCommand + ": " + strings.Join(c.Command, " ")
	case KindHTTP:
		return KindHTTP + ": " + redactURL(c.URL)
	}
	return ""
}

// TimeoutDuration is Timeout parsed (after Validate).
func (c Config) TimeoutDuration() time.Duration {
	d, _ := time.ParseDuration(c.Timeout)
	return d
}

// New is the Scorer of c (validated here): Math{FormatWeight: formatWeight}
// for math, else a Code (its sandbox tried once: NewSandbox), a Command or
// an HTTP. formatWeight (algo.format_reward)
// applies to math only. A command's program is looked up now and started
// on the first Score; an http scorer reads its token now.
func New(c Config, formatWeight float64) (Scorer, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Kind == KindMath {
		return Math{FormatWeight: formatWeight}, nil
	}
	if formatWeight != 0 {
		return nil, fmt.Errorf("config key algo.format_reward: %g applies to reward.kind: math only (a %s reward scores the format itself, if it wants)", formatWeight, c.Kind)
	}
	if c.Kind == KindCode {
		sb, err := NewSandbox(c.Sandbox, c.Code)
		if err != nil {
			return nil, err
		}
		return NewCode(sb, c.OnError), nil
	}
	if c.Kind == KindCommand {
		if _, err := exec.LookPath(c.Command[0]); err != nil {
			return nil, fmt.Errorf("config key reward.command: %w", err)
		}
		return newCommand(c), nil
	}
	token := ""
	if c.TokenEnv != "" {
		token = os.Getenv(c.TokenEnv)
		if token == "" {
			return nil, fmt.Errorf("config key reward.token_env: environment variable %s is unset or empty (it holds the server's bearer token)", c.TokenEnv)
		}
	}
	return newHTTP(c, token), nil
}

// redactURL is raw without user information, query or fragment, which
// may hold secrets, for messages.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a URL that does not parse)"
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	return u.String()
}
