#include "s3/s3_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <utility>

#include "s3/s3_client.h"
#include "testing/test_util.h"

namespace stoker::s3 {
namespace {

TEST(S3Uri, ParsesBucketAndPrefix) {
  auto a = ParseS3Uri("s3://my-bucket/data/imagenet.stoker/");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->bucket, "my-bucket");
  EXPECT_EQ(a->prefix, "data/imagenet.stoker");
  auto b = ParseS3Uri("s3://my-bucket");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->prefix, "");
  for (const char* bad : {"s3://", "s3://ab/x", "s3://Upper/x", "s3://-bucket/x", "s3://b_b_b/x",
                          "s3://bucket/a//b", "http://bucket/x"}) {
    EXPECT_FALSE(ParseS3Uri(bad).has_value()) << bad;
  }
}

TEST(S3Config, EnvironmentWinsAndEndpointsArePathStyle) {
  stoker::test::TempDir home;
  auto c = LoadS3Config({{"AWS_ACCESS_KEY_ID", "AK"},
                         {"AWS_SECRET_ACCESS_KEY", "SK"},
                         {"AWS_SESSION_TOKEN", "TOK"},
                         {"AWS_REGION", "eu-west-3"},
                         {"AWS_ENDPOINT_URL", "http://127.0.0.1:7480/"},
                         {"AWS_MAX_ATTEMPTS", "7"}},
                        home.path());
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_EQ(c->credentials->Current()->access_key, "AK");
  EXPECT_EQ(c->credentials->Current()->session_token, "TOK");
  EXPECT_EQ(c->region, "eu-west-3");
  EXPECT_EQ(c->endpoint, "http://127.0.0.1:7480");
  EXPECT_TRUE(c->path_style);
  EXPECT_EQ(c->max_attempts, 7);
  // The S3-specific endpoint beats the general one; without any, AWS's regional endpoint.
  auto s3 = LoadS3Config({{"AWS_ACCESS_KEY_ID", "a"},
                          {"AWS_SECRET_ACCESS_KEY", "s"},
                          {"AWS_ENDPOINT_URL", "http://general:1"},
                          {"AWS_ENDPOINT_URL_S3", "https://s3only:2"}},
                         home.path());
  EXPECT_EQ(s3->endpoint, "https://s3only:2");
  auto aws =
      LoadS3Config({{"AWS_ACCESS_KEY_ID", "a"}, {"AWS_SECRET_ACCESS_KEY", "s"}}, home.path());
  EXPECT_EQ(aws->endpoint, "https://s3.us-east-1.amazonaws.com");
  EXPECT_FALSE(aws->path_style);
  EXPECT_EQ(aws->max_attempts, 3);
}

TEST(S3Config, ProfilesFromTheAwsFiles) {
  stoker::test::TempDir home;
  std::filesystem::create_directories(home.Join(".aws"));
  stoker::test::WriteStringToFile(home.Join(".aws/credentials"),
                                  "[default]\naws_access_key_id = DEF\naws_secret_access_key = d\n"
                                  "# a comment\n[train]\naws_access_key_id=TRAIN\n"
                                  "aws_secret_access_key = t  \naws_session_token = tt\n");
  stoker::test::WriteStringToFile(home.Join(".aws/config"),
                                  "[default]\nregion = us-west-2\n[profile train]\n"
                                  "region = ap-south-1\nretry_mode = legacy\n"
                                  "endpoint_url = http://minio:9000\n");
  auto def = LoadS3Config({}, home.path());
  ASSERT_TRUE(def.has_value()) << def.error().ToString();
  EXPECT_EQ(def->credentials->Current()->access_key, "DEF");
  EXPECT_EQ(def->region, "us-west-2");
  auto train = LoadS3Config({{"AWS_PROFILE", "train"}}, home.path());
  ASSERT_TRUE(train.has_value()) << train.error().ToString();
  EXPECT_EQ(train->credentials->Current()->access_key, "TRAIN");
  EXPECT_EQ(train->credentials->Current()->secret_key, "t");
  EXPECT_EQ(train->credentials->Current()->session_token, "tt");
  EXPECT_EQ(train->region, "ap-south-1");
  EXPECT_EQ(train->endpoint, "http://minio:9000");
  EXPECT_EQ(train->retry_mode, "legacy");
  EXPECT_EQ(train->max_attempts, 5);  // legacy mode's default, as the SDKs
}

TEST(S3Config, MistakesAreNamed) {
  stoker::test::TempDir home;
  auto none = LoadS3Config({{"AWS_EC2_METADATA_DISABLED", "true"}}, home.path());
  ASSERT_FALSE(none.has_value());
  EXPECT_NE(none.error().message().find("AWS_ACCESS_KEY_ID"), std::string::npos);
  const std::map<std::string, std::string> keys{{"AWS_ACCESS_KEY_ID", "a"},
                                                {"AWS_SECRET_ACCESS_KEY", "s"}};
  auto with = [&](const std::string& k, std::string v) {
    auto env = keys;
    env[k] = std::move(v);
    return LoadS3Config(env, home.path());
  };
  EXPECT_NE(with("AWS_MAX_ATTEMPTS", "0").error().message().find("AWS_MAX_ATTEMPTS"),
            std::string::npos);
  EXPECT_NE(with("AWS_RETRY_MODE", "eager").error().message().find("AWS_RETRY_MODE"),
            std::string::npos);
  EXPECT_FALSE(with("AWS_ENDPOINT_URL", "minio:9000").has_value());
}

TEST(S3Listing, PagesKeysAndPrefixesDecoded) {
  ObjectListing out;
  auto token = ParseListPage(
      "<?xml version=\"1.0\"?><ListBucketResult><IsTruncated>true</IsTruncated>"
      "<Contents><Key>ds/a+b%2Bc.jpg</Key><Size>3</Size></Contents>"
      "<Contents><Key>ds/%C3%BC&amp;x</Key></Contents>"
      "<CommonPrefixes><Prefix>ds/sub/</Prefix></CommonPrefixes>"
      "<NextContinuationToken>tok&amp;1</NextContinuationToken></ListBucketResult>",
      &out);
  ASSERT_TRUE(token.has_value());
  EXPECT_EQ(*token, "tok&1");
  EXPECT_EQ(out.keys, (std::vector<std::string>{"ds/a b+c.jpg", "ds/\xc3\xbc&x"}));
  EXPECT_EQ(out.prefixes, (std::vector<std::string>{"ds/sub/"}));
  auto last =
      ParseListPage("<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>", &out);
  EXPECT_EQ(*last, "");
  EXPECT_FALSE(ParseListPage("<Error><Code>x</Code></Error>", &out).has_value());
  EXPECT_FALSE(
      ParseListPage("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>", &out)
          .has_value());
}

}  // namespace
}  // namespace stoker::s3
