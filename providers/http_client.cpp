#include "providers/http_client.hpp"

#include <openssl/err.h>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>
#include <stdexcept>

namespace wuhu::providers::http {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace ssl = boost::asio::ssl;
using boost::system::error_code;
using tcp = boost::asio::ip::tcp;

namespace {

class error_category final : public boost::system::error_category {
  public:
    const char* name() const noexcept override { return "wuhu.http"; }
    std::string message(int ev) const override {
        switch (static_cast<errc>(ev)) {
            case errc::connect_failed:
                return "could not connect";
            case errc::timeout:
                return "timed out";
            case errc::connection_lost:
                return "connection lost";
            case errc::protocol:
                return "not a valid HTTP response";
            case errc::no_such_host:
                return "no such host";
            case errc::not_trusted:
                return "the server's certificate does not verify";
        }
        return "unknown HTTP error";
    }
};

// The error a transport failure is reported as.
error_code sorted(const error_code& ec, bool connecting) {
    if (ec == beast::error::timeout) {
        return errc::timeout;
    }
    if (connecting) {
        return errc::connect_failed;
    }
    if (ec.category() == error_code(bhttp::error::end_of_stream).category() &&
        ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
        return errc::protocol;  // the parser's errors: bad status line, header past the limit…
    }
    return errc::connection_lost;  // reset, end of stream, a TLS record cut short
}

}  // namespace

const boost::system::error_category& category() {
    static const error_category c;
    return c;
}

boost::system::result<base_url, std::string> parse_base_url(std::string_view url) {
    base_url out;
    if (url.starts_with("https://")) {
        out.tls = true;
        url.remove_prefix(8);
    } else if (url.starts_with("http://")) {
        url.remove_prefix(7);
    } else {
        return std::string("the URL must start with http:// or https://");
    }
    const auto slash = url.find('/');
    std::string_view authority = url.substr(0, slash);
    std::string_view path = slash == std::string_view::npos ? "" : url.substr(slash);
    if (authority.find('@') != std::string_view::npos ||
        path.find_first_of("?#") != std::string_view::npos ||
        url.find_first_of(" \t\r\n") != std::string_view::npos) {
        return std::string("the URL must have no user info, query, fragment or spaces");
    }
    std::string_view port;
    if (authority.starts_with('[')) {
        const auto close = authority.find(']');
        if (close == std::string_view::npos) {
            return std::string("an IPv6 host must be closed by ']'");
        }
        out.host = authority.substr(1, close - 1);
        auto rest = authority.substr(close + 1);
        if (!rest.empty()) {
            if (!rest.starts_with(':')) {
                return std::string("unexpected text after the host");
            }
            port = rest.substr(1);
        }
    } else {
        const auto colon = authority.find(':');
        out.host = authority.substr(0, colon);
        if (colon != std::string_view::npos) {
            port = authority.substr(colon + 1);
        }
    }
    if (out.host.empty()) {
        return std::string("the URL has no host");
    }
    if (!port.empty()) {
        int n = 0;
        auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), n);
        if (ec != std::errc{} || end != port.data() + port.size() || n < 1 || n > 65535) {
            return std::string("the port must be 1-65535");
        }
        out.port = port;
    } else {
        out.port = out.tls ? "443" : "80";
    }
    while (path.ends_with('/')) {
        path.remove_suffix(1);
    }
    out.path = path;
    return out;
}

std::string_view response_head::header(std::string_view name) const {
    for (const auto& [k, v] : headers) {
        if (beast::iequals(k, name)) {
            return v;
        }
    }
    return {};
}

struct client::tls_context {
    ssl::context ctx{ssl::context::tls_client};
};

struct client::connection {
    std::optional<beast::tcp_stream> plain;
    std::optional<beast::ssl_stream<beast::tcp_stream>> secure;
    beast::flat_buffer buffer;

    beast::tcp_stream& lowest() { return secure ? secure->next_layer() : *plain; }
    void close() {
        error_code ignored;
        lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
        lowest().socket().close(ignored);
    }
};

client::client(asio::any_io_executor ex, base_url base, client_options o)
    : ex_(std::move(ex)), base_(std::move(base)), opts_(std::move(o)) {
    if (base_.tls) {
        tls_ = std::make_unique<tls_context>();
        tls_->ctx.set_verify_mode(ssl::verify_peer);
        error_code ec;
        if (opts_.ca_file.empty()) {
            tls_->ctx.set_default_verify_paths(ec);
        } else {
            tls_->ctx.load_verify_file(opts_.ca_file, ec);
        }
        if (ec) {
            throw std::invalid_argument(
                "cannot load the CA certificates " +
                (opts_.ca_file.empty() ? std::string("of the system") : opts_.ca_file) + ": " +
                ec.message());
        }
    }
}

client::~client() {
    for (auto& c : idle_) {
        c->close();
    }
}

std::size_t client::idle() const {
    return idle_.size();
}

asio::awaitable<error_code> client::connect(std::shared_ptr<connection>& c,
                                            asio::cancellation_slot slot, std::function<void()> arm,
                                            std::string* detail) {
    error_code ec;
    auto token = asio::bind_cancellation_slot(asio::cancellation_slot(),
                                              asio::redirect_error(asio::use_awaitable, ec));
    // Resolving counts against the connect timeout, and a cancellation stops it too. The
    // deadline's handler and the slot's share the resolver with this frame: a deadline that
    // expired as the resolve completed has its handler queued, and it may run after this
    // coroutine has returned (so may a cancellation before the next arm()).
    struct resolving_state {
        explicit resolving_state(const asio::any_io_executor& ex) : resolver(ex) {}
        tcp::resolver resolver;
        bool timed_out = false;
    };
    auto state = std::make_shared<resolving_state>(ex_);
    asio::steady_timer deadline(ex_);
    deadline.expires_after(opts_.connect_timeout);
    deadline.async_wait([state](const error_code& e) {
        if (!e) {
            state->timed_out = true;
            state->resolver.cancel();
        }
    });
    if (slot.is_connected()) {
        slot.assign([state](asio::cancellation_type) { state->resolver.cancel(); });
    }
    auto resolving = state->resolver.async_resolve(base_.host, base_.port, token);
    auto endpoints = co_await std::move(resolving);
    deadline.cancel();
    const bool timed_out = state->timed_out;
    if (ec) {
        if (detail != nullptr) {
            *detail = "cannot resolve " + base_.host + ": " +
                      (timed_out ? std::string("timed out") : ec.message());
        }
        if (timed_out) {
            co_return errc::timeout;
        }
        co_return ec == asio::error::host_not_found ? errc::no_such_host : errc::connect_failed;
    }
    c = std::make_shared<connection>();
    if (tls_) {
        c->secure.emplace(ex_, tls_->ctx);
    } else {
        c->plain.emplace(ex_);
    }
    c->lowest().expires_after(opts_.connect_timeout);
    arm();
    auto connecting = c->lowest().async_connect(endpoints, token);
    co_await std::move(connecting);
    if (!ec) {
        // A request goes out in one write, but nothing should wait on Nagle either way.
        error_code ignored;
        c->lowest().socket().set_option(tcp::no_delay(true), ignored);
    }
    error_code not_an_ip;
    asio::ip::make_address(base_.host, not_an_ip);
    if (!ec && tls_) {
        // SNI names a host; an IP address is never sent in it (RFC 6066).
        if (not_an_ip &&
            !SSL_set_tlsext_host_name(c->secure->native_handle(), base_.host.c_str())) {
            ec = error_code(static_cast<int>(::ERR_get_error()), asio::error::get_ssl_category());
        } else {
            c->secure->set_verify_callback(ssl::host_name_verification(base_.host));
            arm();
            auto shaking = c->secure->async_handshake(ssl::stream_base::client, token);
            co_await std::move(shaking);
        }
    }
    if (ec) {
        if (detail != nullptr) {
            *detail = "cannot connect to " + base_.host + ":" + base_.port + ": " + ec.message();
        }
        // A certificate that does not verify is the server's (or the configuration's) doing:
        // trying again does not help.
        const bool untrusted = ec.category() == asio::error::get_ssl_category() &&
                               ERR_GET_REASON(static_cast<unsigned long>(ec.value())) ==
                                   SSL_R_CERTIFICATE_VERIFY_FAILED;
        const auto out = untrusted ? error_code(errc::not_trusted) : sorted(ec, true);
        c.reset();
        co_return out;
    }
    ++opened_;
    co_return error_code{};
}

asio::awaitable<error_code> client::send(request req, head_handler on_head, body_handler on_body,
                                         std::string* detail) {
    // Cancellation closes whichever connection the request is using at that moment. The
    // I/O runs with no cancellation slot of its own; the coroutine's slot holds a handler
    // that closes the connection instead, armed before each wait (the coroutine clears its
    // slot whenever it resumes).
    auto cs = co_await asio::this_coro::cancellation_state;
    std::shared_ptr<connection> current;
    auto slot = cs.slot();
    auto arm = [&slot, &current] {
        if (slot.is_connected()) {
            slot.assign([&current](asio::cancellation_type) {
                if (current) {
                    current->close();
                }
            });
        }
    };
    struct clear_slot {
        asio::cancellation_slot s;
        ~clear_slot() {
            if (s.is_connected()) {
                s.clear();
            }
        }
    } clearing{slot};
    auto cancelled = [&] { return cs.cancelled() != asio::cancellation_type::none; };

    bhttp::request<bhttp::string_body> r;
    r.method_string(req.method);
    r.target(base_.path + req.target);
    r.version(11);
    const bool default_port = base_.port == (base_.tls ? "443" : "80");
    r.set(bhttp::field::host,
          (base_.host.find(':') != std::string::npos ? "[" + base_.host + "]" : base_.host) +
              (default_port ? "" : ":" + base_.port));
    r.set(bhttp::field::user_agent, "wuhu");
    for (const auto& [k, v] : req.headers) {
        r.set(k, v);
    }
    r.body() = std::move(req.body);
    r.keep_alive(true);
    r.prepare_payload();

    // A reused connection the server closed meanwhile fails before any byte of the response:
    // the request is sent again once, on a new connection.
    for (int attempt = 0;; ++attempt) {
        const bool reused = !idle_.empty() && attempt == 0;
        if (reused) {
            current = std::move(idle_.back());
            idle_.pop_back();
        } else {
            auto connecting = connect(current, slot, arm, detail);
            auto failed = co_await std::move(connecting);
            if (cancelled()) {
                co_return asio::error::operation_aborted;
            }
            if (failed) {
                co_return failed;
            }
        }
        error_code ec;
        auto token = asio::bind_cancellation_slot(asio::cancellation_slot(),
                                                  asio::redirect_error(asio::use_awaitable, ec));
        auto& lowest = current->lowest();
        lowest.expires_after(opts_.idle_timeout);
        arm();
        bool written = false;
        if (current->secure) {
            auto writing = bhttp::async_write(*current->secure, r, token);
            co_await std::move(writing);
        } else {
            auto writing = bhttp::async_write(*current->plain, r, token);
            co_await std::move(writing);
        }
        bhttp::response_parser<bhttp::buffer_body> p;
        p.body_limit(boost::none);
        p.header_limit(static_cast<std::uint32_t>(opts_.max_header_bytes));
        if (!ec) {
            written = true;
            lowest.expires_after(opts_.first_byte_timeout);
            arm();
            if (current->secure) {
                auto reading =
                    bhttp::async_read_header(*current->secure, current->buffer, p, token);
                co_await std::move(reading);
            } else {
                auto reading = bhttp::async_read_header(*current->plain, current->buffer, p, token);
                co_await std::move(reading);
            }
        }
        if (cancelled()) {
            current->close();
            co_return asio::error::operation_aborted;
        }
        if (ec) {
            current->close();
            // A pooled connection the server had closed: the write fails, or the read ends at
            // once with nothing (EOF, a reset). Sent again once, on a new connection; never
            // when any of a response came (the server took the request).
            const bool closed_before =
                ec == bhttp::error::end_of_stream || ec == asio::error::eof ||
                ec == asio::error::connection_reset || ec == asio::error::broken_pipe;
            if (reused && (!written || (closed_before && !p.got_some()))) {
                continue;
            }
            if (detail != nullptr) {
                *detail = base_.host + ":" + base_.port + ": " + ec.message();
            }
            co_return sorted(ec, false);
        }
        response_head head;
        head.status = static_cast<int>(p.get().result_int());
        for (const auto& f : p.get()) {
            head.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
        }
        on_head(head);
        char buf[16 * 1024];
        while (!p.is_done()) {
            p.get().body().data = buf;
            p.get().body().size = sizeof buf;
            lowest.expires_after(opts_.idle_timeout);
            arm();
            if (current->secure) {
                auto reading = bhttp::async_read_some(*current->secure, current->buffer, p, token);
                co_await std::move(reading);
            } else {
                auto reading = bhttp::async_read_some(*current->plain, current->buffer, p, token);
                co_await std::move(reading);
            }
            if (ec == bhttp::error::need_buffer) {
                ec = {};
            }
            if (cancelled()) {
                current->close();
                co_return asio::error::operation_aborted;
            }
            if (ec) {
                current->close();
                if (detail != nullptr) {
                    *detail = base_.host + ":" + base_.port + ": " + ec.message();
                }
                co_return sorted(ec, false);
            }
            const auto got = sizeof buf - p.get().body().size;
            if (got > 0 && !on_body(std::string_view(buf, got))) {
                current->close();
                co_return error_code{};
            }
        }
        if (p.keep_alive() && idle_.size() < opts_.max_idle_connections) {
            lowest.expires_never();
            idle_.push_back(std::move(current));
        } else {
            current->close();
        }
        co_return error_code{};
    }
}

}  // namespace wuhu::providers::http
