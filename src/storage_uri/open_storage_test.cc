#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "node_client/node_storage.h"
#include "stoker/storage.h"
#include "testing/test_util.h"

namespace stoker {
namespace {

TEST(OpenStorage, OpenStorageAcceptsPathsAndFileUris) {
  test::TempDir dir;
  auto plain = OpenStorage(dir.path());
  ASSERT_TRUE(plain.has_value());
  test::WriteStored(**plain, "x", "via path");
  auto uri = OpenStorage("file://" + dir.path());
  ASSERT_TRUE(uri.has_value());
  EXPECT_EQ(test::ReadStored(**uri, "x"), "via path");
  EXPECT_EQ(test::ReadFileToString(dir.Join("x")), "via path");
  auto localhost = OpenStorage("file://localhost" + dir.path());
  ASSERT_TRUE(localhost.has_value());
  EXPECT_EQ(test::ReadStored(**localhost, "x"), "via path");
  // A host (or a relative path written as a URI) is refused, not read as a local relative path.
  for (const char* other : {"file://otherhost/data/ds", "file://relative/ds"}) {
    auto refused = OpenStorage(other);
    ASSERT_FALSE(refused.has_value()) << other;
    EXPECT_EQ(refused.error().code(), StatusCode::kInvalidArgument) << other;
    EXPECT_NE(refused.error().message().find("file:///absolute/path"), std::string::npos);
  }
  EXPECT_EQ(OpenStorage("gs://bucket/x").error().code(), StatusCode::kUnsupported);
  EXPECT_EQ(OpenStorage("").error().code(), StatusCode::kInvalidArgument);
}
// The node daemon goes in front of the store when the options or $STOKER_NODE name its socket;
// an empty socket in the options means never, whatever the environment says.
TEST(OpenStorage, TheNodeSocketComesFromTheOptionsOrTheEnvironment) {
  test::TempDir dir;
  const std::string socket = dir.Join("no-daemon.sock");
  ::unsetenv("STOKER_NODE");
  EXPECT_FALSE(node::GetNodeStorageStats(*OpenStorage(dir.path()).value()).has_value());
  StorageOptions through;
  through.node_socket = socket;
  EXPECT_TRUE(node::GetNodeStorageStats(*OpenStorage(dir.path(), through).value()).has_value());
  ::setenv("STOKER_NODE", socket.c_str(), 1);
  EXPECT_TRUE(node::GetNodeStorageStats(*OpenStorage(dir.path()).value()).has_value());
  StorageOptions direct;
  direct.node_socket = "";
  EXPECT_FALSE(node::GetNodeStorageStats(*OpenStorage(dir.path(), direct).value()).has_value());
  ::unsetenv("STOKER_NODE");
}

// S3 keys, endpoint and region given as options stand in for the AWS settings; without them
// (and with no AWS environment or files) the open says what is missing.
TEST(OpenStorage, S3KeysAndEndpointComeFromTheOptions) {
  test::TempDir home;
  for (const char* name : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                           "AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                           "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_REGION"}) {
    ::unsetenv(name);
  }
  ::setenv("AWS_EC2_METADATA_DISABLED", "true", 1);  // no instance metadata probe from a test
  const char* old_home = std::getenv("HOME");
  const std::string saved_home = old_home != nullptr ? old_home : "";
  ::setenv("HOME", home.path().c_str(), 1);
  auto missing = OpenStorage("s3://bucket/prefix");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.error().message().find("no S3 credentials"), std::string::npos);

  StorageOptions options;
  options.s3_keys = StorageOptions::S3Keys{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG", ""};
  options.s3_endpoint = "ftp://127.0.0.1:9";
  auto bad_endpoint = OpenStorage("s3://bucket/prefix", options);
  ASSERT_FALSE(bad_endpoint.has_value());
  EXPECT_NE(bad_endpoint.error().message().find("ftp://127.0.0.1:9"), std::string::npos);
  options.s3_endpoint = "http://127.0.0.1:9";
  options.s3_region = "eu-west-3";
  auto opened = OpenStorage("s3://bucket/prefix", options);
  ASSERT_TRUE(opened.has_value()) << opened.error().ToString();
  EXPECT_EQ((*opened)->Describe("x"), "s3://bucket/prefix/x");
  ::setenv("HOME", saved_home.c_str(), 1);
}

}  // namespace
}  // namespace stoker
