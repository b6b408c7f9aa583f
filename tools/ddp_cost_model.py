"""What the GPU and CPU cost models of DDP share (tools/gpu_cost_model.py, tools/cpu_cost_model.py;
docs/PERFORMANCE.md): DDP's buckets, the ring allreduce's time, and the pipeline of bucket
allreduces behind backward.

The pipeline, per training step: a bucket's allreduce starts when its last gradient is ready and the
bucket before it is done (one communication stream or thread, in bucket order, as dist/ddp's reducer
issues them); what runs past the end of backward is exposed; step = compute + exposed.
"""


def buckets(ready, first_cap_bytes, cap_bytes):
    """[(bytes, ready, [params])] from [(param, bytes, ready)] in bucket (reverse registration)
    order: a bucket closes once it reaches its cap, the first at first_cap_bytes (as
    dist/ddp/bucket_assignment.h does)."""
    out = []
    size, members, when = 0, [], 0.0
    for name, nbytes, t in ready:
        size += nbytes
        members.append(name)
        when = max(when, t)
        if size >= (first_cap_bytes if not out else cap_bytes):
            out.append((size, when, members))
            size, members, when = 0, [], 0.0
    if members:
        out.append((size, when, members))
    return out


def ring_seconds(nbytes, n, bytes_per_second, latency_seconds):
    """A ring allreduce of nbytes over n ranks: every rank sends and receives 2(n-1)/n of the
    message over its slowest link (bytes_per_second), plus the latency of the ring's 2(n-1)
    steps (latency_seconds, already summed over them). 0 for one rank."""
    if n <= 1:
        return 0.0
    return 2.0 * (n - 1) / n * nbytes / bytes_per_second + latency_seconds


def pipeline(bucket_ready_and_seconds, backward_end):
    """[(ready, allreduce seconds)] in bucket order, and when backward ends (same clock) ->
    (communication summed, end of the last allreduce, exposed = what runs past backward)."""
    end = 0.0
    comm = 0.0
    for ready, seconds in bucket_ready_and_seconds:
        comm += seconds
        end = max(end, ready) + seconds
    if not bucket_ready_and_seconds:
        return 0.0, backward_end, 0.0
    return comm, end, max(0.0, end - backward_end)
