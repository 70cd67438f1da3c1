package dist

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// Options configure a process group.
type Options struct {
	Backend string        // "gloo", "nccl" or "" (nccl on CUDA devices, else gloo)
	Timeout time.Duration // rendezvous and every collective; 0: 5 minutes
	Device  gotch.Device  // where the group's tensors live (nccl needs CUDA, gloo the CPU)
}

// DefaultTimeout bounds the rendezvous and each collective when
// Options.Timeout is 0. A peer that is alive but never joins a collective
// is only noticed when it passes.
const DefaultTimeout = 5 * time.Minute

// Available says whether this build has Gloo / NCCL support, and if not,
// why (`make deps` found no Gloo headers; not a CUDA build; …).
func Available() (gloo, nccl bool, why string) { return csrc.DistSupport() }

// Init joins the process group of env (world size 1: Single()). Rank 0
// serves the TCPStore at MASTER_ADDR:MASTER_PORT unless env.AgentStore. It
// returns once every rank has joined, or with an error after o.Timeout.
//
// Gloo listens on: the interfaces GLOO_SOCKET_IFNAME names, if set;
// 127.0.0.1 when the whole world is on this machine; otherwise this
// machine's address on the route to MASTER_ADDR. Across machines, set
// GLOO_SOCKET_IFNAME when that route is not the one the nodes share.
//
// An NCCL group's device (o.Device) becomes the calling thread's current
// CUDA device before the group is made.
//
// Init makes the process ignore SIGPIPE: Gloo writes to peers' sockets, and
// a write to a dead peer would otherwise kill the survivor before it could
// report which rank died.
func Init(env Env, o Options) (Comm, error) {
	if env.World <= 1 {
		return Single(), nil
	}
	return joinGroup(env, o)
}

// joinGroup is Init for a real process group, of any size (a test joins a
// group of one).
func joinGroup(env Env, o Options) (Comm, error) {
	fail := func(err error) error { return fmt.Errorf("dist rank %d/%d: init: %w", env.Rank, env.World, err) }
	if env.Rank < 0 || env.Rank >= env.World {
		return nil, fail(fmt.Errorf("rank %d out of range", env.Rank))
	}
	backend := o.Backend
	if backend == "" {
		backend = "gloo"
		if o.Device.IsCuda() {
			backend = "nccl"
		}
	}
	gloo, nccl, why := Available()
	switch {
	case backend != "gloo" && backend != "nccl":
		return nil, fail(fmt.Errorf("unknown backend %q (want gloo or nccl)", backend))
	case !gloo:
		return nil, fail(fmt.Errorf("lanpo was built without distributed support (%s)", why))
	case backend == "nccl" && !nccl:
		return nil, fail(fmt.Errorf("nccl backend unavailable (%s)", why))
	case backend == "nccl" && !o.Device.IsCuda():
		return nil, fail(errors.New("the nccl backend needs a CUDA device"))
	case backend == "gloo" && o.Device.IsCuda():
		return nil, fail(errors.New("lanpo's gloo groups hold CPU tensors; use nccl for CUDA"))
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	bind, err := glooBindHost(env)
	if err != nil {
		return nil, fail(err)
	}
	if backend == "nccl" {
		// NCCL's communicators and streams go to the calling thread's current
		// device: make it the group's before anything touches CUDA for it
		// (a no-op when the trainer's UseDevice already did).
		if _, err := csrc.SetCUDADevice(o.Device.Value); err != nil {
			return nil, fail(err)
		}
	}
	signal.Ignore(syscall.SIGPIPE)
	g, err := csrc.NewDistGroup(csrc.DistConfig{
		Backend: backend, Host: env.MasterAddr, Port: env.MasterPort, Rank: env.Rank, Size: env.World,
		IsServer: env.Rank == 0 && !env.AgentStore, Prefix: env.StorePrefix(), BindHost: bind,
		Timeout: timeout, Device: o.Device,
	})
	if err != nil {
		return nil, fmt.Errorf("dist rank %d/%d: %w", env.Rank, env.World, err)
	}
	c := &group{g: g, rank: env.Rank, size: env.World, device: o.Device}
	if err := c.exchangePeers(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// glooBindHost picks the address Gloo listens on (see Init). An empty
// answer leaves it to torch (whatever the hostname resolves to).
func glooBindHost(env Env) (string, error) {
	if os.Getenv("GLOO_SOCKET_IFNAME") != "" {
		return "", nil // dist.cpp uses the interfaces
	}
	if env.LocalWorld == env.World {
		return "127.0.0.1", nil
	}
	// The local end of a UDP "connection" is the address of the route to
	// the master; nothing is sent.
	conn, err := net.Dial("udp", net.JoinHostPort(env.MasterAddr, fmt.Sprint(env.MasterPort)))
	if err != nil {
		return "", fmt.Errorf("no route to MASTER_ADDR %s: %w (set GLOO_SOCKET_IFNAME to the interface the nodes share)", env.MasterAddr, err)
	}
	defer conn.Close()
	ip := conn.LocalAddr().(*net.UDPAddr).IP
	if ip.IsLoopback() {
		return "", fmt.Errorf("MASTER_ADDR %s is this machine's loopback address, which the other nodes cannot reach: "+
			"give MASTER_ADDR as an address they can, or set GLOO_SOCKET_IFNAME", env.MasterAddr)
	}
	return ip.String(), nil
}

// group is a Comm over a c10d process group.
type group struct {
	g          *csrc.DistGroup
	rank, size int
	device     gotch.Device
	peers      []peer // every rank's host and pid, for naming a dead one
	failed     error  // the first failure; the group is unusable after it
}

func (c *group) Rank() int { return c.rank }
func (c *group) Size() int { return c.size }

// do runs one collective after checking its tensors. A bad argument is
// refused before anything is sent, and the group stays usable (every rank
// must still issue the same collectives: a rank that refused one leaves the
// others waiting). Any other error names this rank and, when ranks on this
// host have exited, which; the group then refuses all further work.
func (c *group) do(op string, args []arg, f func() error) error {
	if c.failed != nil {
		return fmt.Errorf("dist rank %d/%d: %s: the group failed earlier: %w", c.rank, c.size, op, c.failed)
	}
	if c.g == nil {
		return fmt.Errorf("dist rank %d/%d: %s: the group is closed", c.rank, c.size, op)
	}
	if err := c.check(args); err != nil {
		return fmt.Errorf("dist rank %d/%d: %s: %w", c.rank, c.size, op, err)
	}
	if err := f(); err != nil {
		c.failed = fmt.Errorf("dist rank %d/%d: %w%s", c.rank, c.size, err, c.diagnose())
		return c.failed
	}
	return nil
}

// arg is one tensor argument of a collective and, if it is sized by
// another, how many elements it must have.
type arg struct {
	name  string
	t     *ts.Tensor
	numel func() int64 // nil: any
}

func (c *group) check(args []arg) (err error) {
	defer tensor.Recover("check", &err)
	for _, a := range args {
		if a.t == nil || !a.t.MustDefined() {
			return fmt.Errorf("%s is not a tensor", a.name)
		}
	}
	for i, a := range args {
		if ok, err := a.t.IsContiguous(); err != nil || !ok {
			return fmt.Errorf("%s must be contiguous (sizes %v)", a.name, a.t.MustSize())
		}
		if d := a.t.MustDevice(); d.IsCuda() != c.device.IsCuda() || (d.IsCuda() && d.Value != c.device.Value) {
			return fmt.Errorf("%s is on %v, the group's tensors on %v", a.name, d, c.device)
		}
		if a.numel != nil && int64(a.t.Numel()) != a.numel() {
			return fmt.Errorf("%s has %d elements, want %d = world size %d × %d", a.name, a.t.Numel(), a.numel(), c.size, a.numel()/int64(c.size))
		}
		if i > 0 && a.t.DType() != args[0].t.DType() {
			return fmt.Errorf("%s is %v, %s %v", a.name, a.t.DType(), args[0].name, args[0].t.DType())
		}
	}
	return nil
}

func (c *group) AllReduceSum(t *ts.Tensor) error {
	return c.do("allreduce", []arg{{"tensor", t, nil}}, func() error { return c.g.AllReduceSum(t) })
}

func (c *group) Broadcast(t *ts.Tensor, root int) error {
	if root < 0 || root >= c.size {
		return fmt.Errorf("dist rank %d/%d: broadcast: root %d is not a rank", c.rank, c.size, root)
	}
	return c.do("broadcast", []arg{{"tensor", t, nil}}, func() error { return c.g.Broadcast(t, root) })
}

func (c *group) ReduceScatterSum(in, out *ts.Tensor) error {
	n := func() int64 { return int64(out.Numel()) * int64(c.size) }
	return c.do("reduce_scatter", []arg{{"output", out, nil}, {"input", in, n}},
		func() error { return c.g.ReduceScatterSum(in, out) })
}

func (c *group) AllGather(in, out *ts.Tensor) error {
	n := func() int64 { return int64(in.Numel()) * int64(c.size) }
	return c.do("allgather", []arg{{"input", in, nil}, {"output", out, n}},
		func() error { return c.g.AllGather(in, out) })
}

func (c *group) Barrier() error { return c.do("barrier", nil, c.g.Barrier) }

// AllGatherBytes gathers the lengths (int64), then every rank's bytes padded
// to the longest: two collectives, the same on every rank whatever the
// lengths.
func (c *group) AllGatherBytes(b []byte) ([][]byte, error) {
	var s tensor.Scope
	defer s.Close()
	dev := c.device
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(b)))
	lens, err := c.fromBytes(&s, n[:], gotch.Int64, 1)
	if err != nil {
		return nil, err
	}
	allLens := s.Keep(ts.MustZeros([]int64{int64(c.size)}, gotch.Int64, dev))
	if err := c.AllGather(lens, allLens); err != nil {
		return nil, err
	}
	raw, err := csrc.ToBytes(allLens)
	if err != nil {
		return nil, c.hostErr(err)
	}
	sizes := make([]int, c.size)
	longest := 0
	for r := range sizes {
		sizes[r] = int(binary.LittleEndian.Uint64(raw[8*r:]))
		longest = max(longest, sizes[r])
	}
	out := make([][]byte, c.size)
	if longest == 0 {
		for r := range out {
			out[r] = []byte{}
		}
		return out, nil
	}
	padded := make([]byte, longest)
	copy(padded, b)
	buf, err := c.fromBytes(&s, padded, gotch.Uint8, longest)
	if err != nil {
		return nil, err
	}
	all := s.Keep(ts.MustZeros([]int64{int64(c.size * longest)}, gotch.Uint8, dev))
	if err := c.AllGather(buf, all); err != nil {
		return nil, err
	}
	data, err := csrc.ToBytes(all)
	if err != nil {
		return nil, c.hostErr(err)
	}
	for r := range out {
		out[r] = append([]byte{}, data[r*longest:r*longest+sizes[r]]...)
	}
	return out, nil
}

// fromBytes makes a 1-D tensor of n elements of dtype from b on the group's
// device, registered in s.
func (c *group) fromBytes(s *tensor.Scope, b []byte, dtype gotch.DType, n int) (*ts.Tensor, error) {
	t, err := csrc.FromBytes(b, []int64{int64(n)}, dtype, dtype, c.device)
	if err != nil {
		return nil, c.hostErr(err)
	}
	return s.Keep(t), nil
}

func (c *group) hostErr(err error) error {
	return fmt.Errorf("dist rank %d/%d: allgather_bytes: %w", c.rank, c.size, err)
}

// Close leaves the group; a rank serving the store stops serving it, so the
// other ranks should be done with the store (they are, once they returned
// from the same last collective).
func (c *group) Close() error {
	if c.g != nil {
		c.g.Close()
		c.g = nil
	}
	return nil
}
