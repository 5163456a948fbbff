#include "metrics/http_endpoint.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <stdexcept>

namespace wuhu::metrics {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct http_endpoint::impl {
    asio::io_context io;
    tcp::acceptor acceptor{io};
    endpoint_handlers handlers;
    std::size_t max_connections = 64;
    std::size_t open = 0;  // the endpoint's thread only
    std::atomic<std::size_t> turned_away{0};
};

namespace {

http::response<http::string_body> answer(const endpoint_handlers& h,
                                         const http::request<http::string_body>& req) {
    http::response<http::string_body> res;
    res.version(req.version());
    res.keep_alive(req.keep_alive());
    res.set(http::field::content_type, "text/plain; charset=utf-8");
    const std::string_view target = req.target();
    const std::string_view path = target.substr(0, target.find('?'));
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
        res.result(http::status::method_not_allowed);
        res.set(http::field::allow, "GET, HEAD");
        res.body() = "only GET\n";
    } else if (path == "/metrics") {
        res.result(http::status::ok);
        res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
        res.body() = h.metrics();
    } else if (path == "/healthz") {
        const bool alive = h.alive(std::chrono::milliseconds(1000));
        res.result(alive ? http::status::ok : http::status::service_unavailable);
        res.body() = alive ? "ok\n" : "the worker's executor did not turn within 1 s\n";
    } else if (path == "/readyz") {
        const auto why = h.unready();
        res.result(why ? http::status::service_unavailable : http::status::ok);
        res.body() = why ? *why + "\n" : "ready\n";
    } else if (path == "/console" && h.files) {
        res.result(http::status::moved_permanently);
        res.set(http::field::location, "/console/" + std::string(target.substr(path.size())));
        res.body() = "the console is at /console/\n";
    } else if (auto f = h.files && path.starts_with("/console/") ? h.files(path) : std::nullopt) {
        res.result(http::status::ok);
        res.set(http::field::content_type, f->content_type);
        res.set("Content-Security-Policy", f->security_policy);
        res.set("X-Content-Type-Options", "nosniff");
        res.set("Referrer-Policy", "no-referrer");
        res.set(http::field::cache_control, "no-cache");
        res.body() = std::string(f->body);
    } else {
        res.result(http::status::not_found);
        res.body() = h.files
                         ? "not found: the paths are /metrics, /healthz, /readyz and /console/\n"
                         : "not found: the paths are /metrics, /healthz and /readyz\n";
    }
    res.prepare_payload();
    if (req.method() == http::verb::head) {
        // The length a GET would have, without its body (prepare_payload would count the
        // emptied body).
        const auto length = res.body().size();
        res.body().clear();
        res.content_length(length);
    }
    return res;
}

asio::awaitable<void> serve(tcp::socket socket, const endpoint_handlers* h, std::size_t* open) {
    struct counted {
        std::size_t* n;
        ~counted() { --*n; }
    } const held{open};
    beast::tcp_stream stream(std::move(socket));
    beast::flat_buffer buffer;
    for (;;) {
        stream.expires_after(std::chrono::seconds(30));
        http::request<http::string_body> req;
        http::request_parser<http::string_body> parser;
        parser.body_limit(64 * 1024);
        boost::system::error_code ec;
        co_await http::async_read(stream, buffer, parser,
                                  asio::redirect_error(asio::use_awaitable, ec));
        if (ec) {
            co_return;  // closed, timed out, or not HTTP
        }
        req = parser.release();
        auto res = answer(*h, req);
        const bool keep = res.keep_alive();
        co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
        if (ec || !keep) {
            stream.socket().shutdown(tcp::socket::shutdown_send, ec);
            co_return;
        }
    }
}

// `Impl`: http_endpoint::impl (private: deduced, never named here).
template <class Impl>
asio::awaitable<void> accept(Impl* self) {
    auto* acceptor = &self->acceptor;
    for (;;) {
        boost::system::error_code ec;
        tcp::socket socket = co_await acceptor->async_accept(
            asio::redirect_error(asio::use_awaitable, ec));
        if (ec == asio::error::operation_aborted) {
            co_return;
        }
        if (ec) {
            continue;
        }
        if (self->open >= self->max_connections) {
            // A cap on what one client can hold open: closed unread (Prometheus retries at its
            // next scrape).
            ++self->turned_away;
            socket.close(ec);
            continue;
        }
        ++self->open;
        asio::co_spawn(acceptor->get_executor(), serve(std::move(socket), &self->handlers, &self->open),
                       asio::detached);
    }
}

}  // namespace

http_endpoint::http_endpoint(const std::string& address, endpoint_handlers handlers,
                             std::size_t max_connections)
    : impl_(std::make_unique<impl>()) {
    impl_->handlers = std::move(handlers);
    impl_->max_connections = max_connections;
    const auto colon = address.rfind(':');
    if (colon == std::string::npos || colon == 0) {
        throw std::invalid_argument("metrics address must be host:port, not \"" + address + "\"");
    }
    boost::system::error_code ec;
    const auto ip = asio::ip::make_address(address.substr(0, colon), ec);
    int port = -1;
    try {
        std::size_t used = 0;
        port = std::stoi(address.substr(colon + 1), &used);
        if (used != address.size() - colon - 1) {
            port = -1;
        }
    } catch (const std::exception&) {
        port = -1;
    }
    if (ec || port < 0 || port > 65535) {
        throw std::invalid_argument("metrics address must be an IP address and a port, not \"" +
                                    address + "\"");
    }
    const tcp::endpoint at(ip, static_cast<unsigned short>(port));
    try {
        impl_->acceptor.open(at.protocol());
        impl_->acceptor.set_option(tcp::acceptor::reuse_address(true));
        impl_->acceptor.bind(at);
        impl_->acceptor.listen();
    } catch (const boost::system::system_error& e) {
        throw std::runtime_error("cannot listen on " + address + " for metrics: " +
                                 e.code().message());
    }
    asio::co_spawn(impl_->io, accept(impl_.get()), asio::detached);
    thread_ = std::thread([this] { impl_->io.run(); });
}

http_endpoint::~http_endpoint() {
    impl_->io.stop();
    if (thread_.joinable()) {
        thread_.join();
    }
}

std::size_t http_endpoint::turned_away() const {
    return impl_->turned_away.load();
}

std::string http_endpoint::address() const {
    const auto at = impl_->acceptor.local_endpoint();
    return at.address().to_string() + ":" + std::to_string(at.port());
}

}  // namespace wuhu::metrics
