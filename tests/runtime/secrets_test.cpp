// runtime/secrets.hpp: the one redaction of URLs, connection strings and secrets in text.
#include "runtime/secrets.hpp"

#include <gtest/gtest.h>

namespace wuhu::testing {

using runtime::redacted_url;
using runtime::scrubbed;
using runtime::url_secrets;

TEST(RedactedUrl, CredentialsNeverReachALogLine) {
    EXPECT_EQ(redacted_url("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
    EXPECT_EQ(redacted_url("nats://ann:s3cr@t@nats.internal:4222"),
              "nats://***@nats.internal:4222");
    EXPECT_EQ(redacted_url("nats://tok3n@a:4222,tls://b:4222,nats://u:p@c"),
              "nats://***@a:4222,tls://b:4222,nats://***@c");
    EXPECT_EQ(redacted_url("u:p@host:4222"), "***@host:4222");
    EXPECT_EQ(redacted_url(""), "");
}

TEST(RedactedUrl, APasswordWithACommaOrSlashIsHiddenWhole) {
    // A list is cut where a URL starts, never at a comma a password may hold.
    EXPECT_EQ(redacted_url("nats://u:a,b@h:4222"), "nats://***@h:4222");
    EXPECT_EQ(redacted_url("postgresql://u:a/b@db:5432/wuhu"), "postgresql://***@db:5432/wuhu");
}

// A `://` inside a password or a keyword's value starts no URL: the text is read as what it
// starts as (found in review: a keyword string with a URL in a value kept its password).
TEST(RedactedUrl, ASchemeInsideAValueStartsNoUrl) {
    EXPECT_EQ(redacted_url("host=db password=hunter2 application_name=svc://x"),
              "host=db password=*** application_name=svc://x");
    EXPECT_EQ(redacted_url("postgresql://u:pa://ss@db/wuhu"), "postgresql://***@db/wuhu");
    EXPECT_EQ(redacted_url("host=db password=a1, nats://u:p@h"), "host=db password=*** nats://***@h");
}

TEST(RedactedUrl, PostgresUrlsAndKeywordStrings) {
    EXPECT_EQ(redacted_url("postgresql://wuhu:pw@db:5432/wuhu?sslmode=require"),
              "postgresql://***@db:5432/wuhu?sslmode=require");
    EXPECT_EQ(redacted_url("postgresql://db/wuhu?user=wuhu&password=pw&sslmode=require"),
              "postgresql://db/wuhu?user=wuhu&password=***&sslmode=require");
    EXPECT_EQ(redacted_url("postgres://db/wuhu?PASSWORD=pw"), "postgres://db/wuhu?PASSWORD=***");
    EXPECT_EQ(redacted_url("host=db user=wuhu password=pw dbname=wuhu"),
              "host=db user=wuhu password=*** dbname=wuhu");
    EXPECT_EQ(redacted_url("host=db password = 'p w\\' x' dbname=wuhu"),
              "host=db password = *** dbname=wuhu");
    EXPECT_EQ(redacted_url("host=127.0.0.1 port=5432 dbname=postgres user=postgres"),
              "host=127.0.0.1 port=5432 dbname=postgres user=postgres");
}

TEST(UrlSecrets, ThePasswordAloneIsASecretToo) {
    const auto s = url_secrets("nats://ann:s3cret@h:4222");
    EXPECT_NE(std::find(s.begin(), s.end(), "ann:s3cret"), s.end());
    EXPECT_NE(std::find(s.begin(), s.end(), "s3cret"), s.end());
    const auto k = url_secrets("host=db password='a b'");
    EXPECT_NE(std::find(k.begin(), k.end(), "a b"), k.end());
    EXPECT_TRUE(url_secrets("nats://127.0.0.1:4222").empty());
}

TEST(Scrubbed, AnErrorThatEchoesTheUrlOrItsPasswordPrintsNeither) {
    const std::string url = "postgresql://wuhu:hunter22@db:5432/wuhu";
    const auto text = scrubbed(
        "could not connect to " + url + ": password hunter22 refused for wuhu:hunter22", url);
    EXPECT_EQ(text.find("hunter22"), std::string::npos) << text;
    EXPECT_NE(text.find("postgresql://***@db:5432/wuhu"), std::string::npos) << text;
    EXPECT_EQ(scrubbed("nothing secret", "nats://127.0.0.1:4222"), "nothing secret");
}

TEST(Redacted, ASecretAndACutTextEndingInItsStart) {
    EXPECT_EQ(runtime::redacted("key=K and K", "K"), "key=*** and ***");
    EXPECT_EQ(runtime::redacted("the key is sk-live-12", "sk-live-123456"), "the key is ***");
    EXPECT_EQ(runtime::redacted(std::string(20, 'a'), "", 10), std::string(10, 'a') + "…");
}

}  // namespace wuhu::testing
