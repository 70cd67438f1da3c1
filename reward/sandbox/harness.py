# lanpo's code harness: runs a candidate program and its checks, inside the
# sandbox, as the sandbox's uid. fd 3 holds the request (JSON: program,
# tests, entry_point, nonce); fd 4 takes the outcome. Success is the line
# "PASS <nonce>" on fd 4, written by an audit hook, and only for the event
# raised by the one call that follows the checks: from this function's own
# frame, at that call's instruction (a C callable the candidate planted —
# an exception's __str__, a finalizer — runs in this frame too, but at
# another instruction). The nonce lives only in that hook's closure (no
# frame, global, argument, environment variable, descriptor or file holds it
# once the candidate runs); the process is not dumpable (no /proc/*/mem, no
# ptrace), and the hook refuses what would reach the nonce or this frame:
# frames (sys._getframe, tb_frame and its kin), gc's object walks, ctypes,
# trace and profile functions. Anything else is one "FAIL <reason>" line
# (the candidate can write lines too: they never count). docs/rewards.md
# states the threat model.
def _main():
    import builtins, os, sys, json
    _exec, _compile, _getframe, _audit, _write, _exit = exec, compile, sys._getframe, sys.audit, os.write, os._exit
    _type, _str, _dict = type, str, dict
    _streams = (sys.stdout, sys.stderr)
    # The exceptions as they are now: a candidate may rebind the names.
    _AE, _ME, _RE, _SE, _BE = AssertionError, MemoryError, RecursionError, SystemExit, BaseException

    def flush():
        # What the candidate printed, for the rollouts log; best effort.
        for f in _streams:
            try:
                f.flush()
            except BaseException:
                pass

    def fail(reason):
        flush()
        try:
            _write(4, ("FAIL " + reason.replace("\n", " ")[:300] + "\n").encode("utf-8", "replace"))
        finally:
            _exit(1)

    _write(4, b"START\n")
    with open(3, "rb", closefd=True) as f:
        req = json.loads(f.read())
    try:
        program = _compile(req["program"], "candidate.py", "exec")
    except SyntaxError as e:
        fail("syntax error in the program: %s (line %s)" % (e.msg, e.lineno))
    except BaseException as e:
        fail("the program does not compile: %s" % _type(e).__name__)
    if req.get("run"):
        # A tool's call (package tools): the program runs and its output is
        # what counts; no verdict to protect, so no audit hook — ctypes,
        # frames and the libraries that use them work. The isolation is the
        # sandbox's all the same (namespaces, user, limits, no network).
        try:
            _exec(program, {"__name__": "__main__"})
        except _ME:
            fail("MemoryError (the memory limit)")
        except _RE:
            fail("RecursionError")
        except _SE as e:
            if e.code not in (None, 0):
                fail("the program exited (SystemExit %s)" % (e.code,))
        except _BE as e:
            fail("%s: %s" % (_type(e).__name__, _str(e)))
        flush()
        _write(4, b"RAN\n")
        _exit(0)
    try:
        tests = _compile(req.get("tests") or "", "tests.py", "exec")
        entry = req.get("entry_point") or ""
        call = _compile("check(%s)" % entry, "check.py", "exec") if entry else None
    except SyntaxError as e:
        fail("the problem's tests do not compile: %s (line %s)" % (e.msg, e.lineno))

    # A tuple: the candidate can reach this frame's locals, not change them.
    pristine = tuple(builtins.__dict__.items())
    me = _getframe()
    # The offset of the one call that may reveal the nonce: the call after
    # the event name's constant in this function's code.
    import dis
    ins = list(dis.get_instructions(me.f_code))
    at = [i for i, x in enumerate(ins) if x.argval == "lanpo.checks_returned"]
    reveal_at = next(x.offset for x in ins[at[0]:] if x.opname.startswith("CALL"))
    del dis, ins, at
    # Not dumpable: /proc/<pid>/mem and ptrace need the owner's dumpable
    # process (or a capability nobody here has).
    import ctypes
    if ctypes.CDLL(None).prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE
        fail("the harness could not make itself non-dumpable")
    del ctypes
    for name in [n for n in sys.modules if n == "ctypes" or n.startswith("ctypes.")]:
        del sys.modules[name]  # a candidate's import runs ctypes anew: its dlopen is refused

    def arm(nonce):
        token = ("PASS " + nonce + "\n").encode()
        state = {"inside": False, "done": False}
        blocked = {"gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys.settrace",
                   "sys.setprofile", "sys._current_frames"}
        # Frames: refused as "not deep enough" (ValueError), which the
        # standard library's callers (namedtuple, typing, enum) handle.
        no_frame = {"sys._getframe", "sys._getframemodulename"}
        frame_attrs = {"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"}

        def hook(event, args):
            if state["inside"]:
                return
            if event == "lanpo.checks_returned":
                state["inside"] = True
                try:
                    f = _getframe(1)
                    ok = f is me and f.f_lasti == reveal_at and not state["done"]
                finally:
                    state["inside"] = False
                if ok:
                    state["done"] = True
                    _write(4, token)
                    flush()
                    _exit(0)
                return
            if event in no_frame:
                raise ValueError("lanpo sandbox: frames are not available")
            if event == "object.__getattr__" and len(args) > 1 and _type(args[1]) is _str and args[1] in frame_attrs:
                raise AttributeError("lanpo sandbox: frames are not available")
            if event in blocked or event.startswith("ctypes."):
                raise RuntimeError("lanpo sandbox: %s is not allowed" % event)
            if event == "open" and args and _type(args[0]) is _str and args[0].startswith("/proc/") \
                    and args[0].rstrip("/").endswith("/mem"):
                raise RuntimeError("lanpo sandbox: reading process memory is not allowed")

        sys.addaudithook(hook)

    arm(req.pop("nonce"))
    del req, arm
    g = {}
    try:
        _exec(program, g)
        # The checks run in the program's names (as the reference does),
        # but with builtins as they were before it ran: a candidate that
        # rebinds abs or isinstance does not change what a test computes
        # (its own functions keep the builtins they were made with).
        g["__builtins__"] = _dict(pristine)
        _exec(tests, g)
        if call is not None:
            _exec(call, g)
    except _AE as e:
        fail("assertion failed" + (": " + _str(e) if _str(e) else ""))
    except _ME:
        fail("MemoryError (the memory limit)")
    except _RE:
        fail("RecursionError")
    except _SE as e:
        fail("the program exited (SystemExit %s) before the checks returned" % (e.code,))
    except _BE as e:
        fail("%s: %s" % (_type(e).__name__, _str(e)))
    _audit("lanpo.checks_returned")
    fail("the checks returned but the result was not recorded")


_main()
