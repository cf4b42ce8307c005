"""slice.py SLICE_US PID...: give every thread of each PID a scheduler slice of SLICE_US
(SCHED_OTHER, sched_setattr's sched_runtime; Linux 6.12 or later, 100 to 100,000 µs)."""
import ctypes, os, struct, sys

SYS_SCHED_SETATTR = 314  # x86_64
libc = ctypes.CDLL(None, use_errno=True)
slice_ns = int(float(sys.argv[1]) * 1000)
for pid in sys.argv[2:]:
    for tid in os.listdir(f"/proc/{pid}/task"):
        # struct sched_attr, first version (48 bytes): size, policy, flags, nice,
        # priority, runtime, deadline, period.
        attr = ctypes.create_string_buffer(struct.pack("=IIQiIQQQ", 48, 0, 0, 0, 0, slice_ns, 0, 0))
        if libc.syscall(SYS_SCHED_SETATTR, int(tid), attr, 0) != 0:
            print("sched_setattr", tid, os.strerror(ctypes.get_errno()), file=sys.stderr)
