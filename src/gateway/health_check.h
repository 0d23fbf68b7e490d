// Active health checks (GW-3): GET /ready on each instance's probe address (the registry label
// drover.health, see host.h) every health_check_interval, with health_check_timeout. Results go
// to Upstream::ReportCheck, which takes an instance out of new-connection routing after
// unhealthy_threshold failures and back after healthy_threshold passes. A frozen process (SIGSTOP)
// still completes TCP handshakes in its kernel, but never answers /ready: the timeout catches it.
//
// Runs as coroutines on the gateway's io_context; they end when it stops. `upstream` must
// outlive them.
#pragma once

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace drover::gateway {

class Upstream;

// Does nothing when the listener's health_check_interval is zero.
void StartHealthChecks(boost::asio::io_context& io, Upstream& upstream);

}  // namespace drover::gateway
