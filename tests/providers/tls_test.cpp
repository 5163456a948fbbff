// The providers' HTTP client over TLS (providers/http_client.hpp): it talks to a local TLS server
// whose certificate a CA given by configuration signed, and refuses a server whose
// certificate does not verify (an unknown CA, another host's name). The certificates are made
// for the test with the openssl command.
#include "providers/http_client.hpp"
#include "tests/support/temp_dir.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <thread>

namespace wuhu::testing {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
namespace http = providers::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

// A CA, and a certificate it signed for `san` ("IP:127.0.0.1", "DNS:other.example").
struct certificates {
    temp_dir dir;
    std::string ca() const { return (dir.path() / "ca.pem").string(); }
    std::string cert() const { return (dir.path() / "server.pem").string(); }
    std::string key() const { return (dir.path() / "server.key").string(); }

    explicit certificates(const std::string& san) {
        const std::string d = dir.path().string();
        const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes ";
        const std::string script =
            "cd '" + d + "' && printf 'subjectAltName=" + san + "\\n' > san.ext && " +
            "openssl req -x509 " + ec + "-keyout ca.key -out ca.pem -days 2 " +
            "-subj '/CN=wuhu test CA' 2>/dev/null && " +
            "openssl req " + ec + "-keyout server.key -out server.csr -subj '/CN=wuhu test' " +
            "2>/dev/null && openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key " +
            "-CAcreateserial -out server.pem -days 2 -extfile san.ext 2>/dev/null";
        if (std::system(script.c_str()) != 0) {
            throw std::runtime_error("openssl could not make the test certificates");
        }
    }
};

// Answers each connection's one request with 200 "ok", over TLS with `certs`' certificate.
class tls_server {
  public:
    explicit tls_server(const certificates& certs)
        : ctx_(ssl::context::tls_server), acceptor_(io_, {asio::ip::make_address("127.0.0.1"), 0}) {
        ctx_.use_certificate_chain_file(certs.cert());
        ctx_.use_private_key_file(certs.key(), ssl::context::pem);
        port_ = acceptor_.local_endpoint().port();
        thread_ = std::thread([this] { serve(); });
    }
    ~tls_server() {
        stopping_ = true;
        error_code ec;
        tcp::socket wake(io_);
        wake.connect({asio::ip::make_address("127.0.0.1"), port_}, ec);
        thread_.join();
    }
    std::string url() const { return "https://127.0.0.1:" + std::to_string(port_); }
    int handshakes_failed() const { return failed_; }

  private:
    void serve() {
        while (!stopping_) {
            tcp::socket s(io_);
            error_code ec;
            acceptor_.accept(s, ec);
            if (ec || stopping_) {
                return;
            }
            ssl::stream<tcp::socket> tls(std::move(s), ctx_);
            tls.handshake(ssl::stream_base::server, ec);
            if (ec) {
                ++failed_;
                continue;
            }
            boost::beast::flat_buffer buf;
            boost::beast::http::request<boost::beast::http::string_body> req;
            boost::beast::http::read(tls, buf, req, ec);
            if (ec) {
                continue;
            }
            boost::beast::http::response<boost::beast::http::string_body> res{
                boost::beast::http::status::ok, 11};
            res.body() = "ok";
            res.keep_alive(false);
            res.prepare_payload();
            boost::beast::http::write(tls, res, ec);
            tls.shutdown(ec);
        }
    }

    asio::io_context io_;
    ssl::context ctx_;
    tcp::acceptor acceptor_;
    unsigned short port_ = 0;
    std::atomic<bool> stopping_ = false;
    std::atomic<int> failed_ = 0;
    std::thread thread_;
};

struct outcome {
    error_code ec;
    std::string body;
    std::string detail;
};

asio::awaitable<void> get_into(http::client& c, outcome& out) {
    http::request r;
    r.method = "GET";
    r.target = "/";
    auto sending = c.send(
        std::move(r), [](const http::response_head&) {},
        [&out](std::string_view piece) {
            out.body += piece;
            return true;
        },
        &out.detail);
    out.ec = co_await std::move(sending);
}

outcome get(const std::string& url, const std::string& ca_file) {
    asio::io_context io;
    http::client_options o;
    o.ca_file = ca_file;
    o.connect_timeout = std::chrono::seconds(5);
    http::client c(io.get_executor(), *http::parse_base_url(url), o);
    outcome out;
    asio::co_spawn(io, get_into(c, out), [](std::exception_ptr e) {
        if (e) {
            std::rethrow_exception(e);
        }
    });
    io.run();
    return out;
}

}  // namespace

TEST(Tls, TheClientTrustsTheCaItIsGivenAndRefusesAServerThatDoesNotVerify) {
    certificates certs("IP:127.0.0.1");
    tls_server server(certs);
    auto trusted = get(server.url(), certs.ca());
    ASSERT_FALSE(trusted.ec) << trusted.ec.message() << ": " << trusted.detail;
    EXPECT_EQ(trusted.body, "ok");
    // The system's CA store does not know the test CA.
    auto unknown = get(server.url(), "");
    EXPECT_EQ(unknown.ec, http::errc::not_trusted) << unknown.detail;
    EXPECT_NE(unknown.detail.find("certificate verify failed"), std::string::npos)
        << unknown.detail;
    EXPECT_TRUE(unknown.body.empty());
}

TEST(Tls, ACertificateForAnotherHostIsRefusedEvenFromATrustedCa) {
    certificates certs("DNS:other.example");
    tls_server server(certs);
    auto mismatch = get(server.url(), certs.ca());
    EXPECT_EQ(mismatch.ec, http::errc::not_trusted) << mismatch.detail;
    EXPECT_TRUE(mismatch.body.empty());
}

TEST(Tls, ACaFileThatCannotBeLoadedIsAClearError) {
    asio::io_context io;
    http::client_options o;
    o.ca_file = "/no/such/ca.pem";
    try {
        http::client c(io.get_executor(), *http::parse_base_url("https://127.0.0.1:1"), o);
        ADD_FAILURE() << "the client was made";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("/no/such/ca.pem"), std::string::npos) << e.what();
    }
}

}  // namespace wuhu::testing
