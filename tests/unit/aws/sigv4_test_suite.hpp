// AWS's Signature Version 4 test suite (the "aws-sig-v4-test-suite" published with the SigV4
// documentation, in the version AWS keeps with its C SDK), as data: each case's request, and the
// canonical request, string to sign, signed headers and signature given for it. Taken from
// awslabs/aws-c-auth
// (tests/aws-signing-test-suite/v4/<case>/: request.txt, context.json,
// header-canonical-request.txt, header-string-to-sign.txt, header-signed-request.txt,
// header-signature.txt; Apache-2.0), commit 495329c2433034bd8fd53fc6ba9e0202d3fac876.
//
// Every case signs with the context AWS gives: access key AKIDEXAMPLE, secret
// wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY, region us-east-1, service "service", time
// 2015-08-30T12:36:00Z. The request's query is given decoded (sign() encodes it); a header folded
// over several lines keeps its line breaks. "add_content_sha256" is the suite's sign_body,
// "sign_session_token = false" its omit_session_token.
//
// Left out: the "-unnormalized" cases, which sign the path as given without resolving "." and ".."
// or dropping empty segments: S3's rule, not that of SQS or EventBridge.
#pragma once

#include <string>
#include <vector>

#include "outbox/aws/sigv4.hpp"

namespace outbox::aws::test {

struct SuiteCase {
  const char* name;
  std::string method;
  std::string path;
  std::vector<QueryParameter> query{};
  std::vector<HttpHeader> headers;
  std::string body{};
  std::string session_token{};
  bool add_content_sha256 = false;
  bool sign_session_token = true;
  std::string canonical_request;
  std::string string_to_sign;
  std::string signed_headers;
  std::string signature;
};

inline constexpr const char* kStsToken =
    "AQoDYXdzEPT//////////"
    "wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRXmxfpSPfIeoIYRqTflfKD8YUuwthAx"
    "7mSEI/qkPpKPi/"
    "kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQDYwT7WZ0wq5VSXDvp75YU9HFvlRd8Tx6q6fE8YQcHNV"
    "XAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZbqBAz+"
    "scqKmlzm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJabIQwj2ICCR/oLxBA==";

inline const std::vector<SuiteCase>& suite_cases() {
  static const std::vector<SuiteCase> cases = {
      {.name = "get_vanilla",
       .method = "GET",
       .path = "/",
       .headers = {{"Host", "example.amazonaws.com"}},
       .canonical_request = "GET\n"
                            "/\n"
                            "\n"
                            "host:example.amazonaws.com\n"
                            "x-amz-date:20150830T123600Z\n"
                            "\n"
                            "host;x-amz-date\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
       .signed_headers = "host;x-amz-date",
       .signature = "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
      {.name = "get_vanilla_query",
       .method = "GET",
       .path = "/",
       .headers = {{"Host", "example.amazonaws.com"}},
       .canonical_request = "GET\n"
                            "/\n"
                            "\n"
                            "host:example.amazonaws.com\n"
                            "x-amz-date:20150830T123600Z\n"
                            "\n"
                            "host;x-amz-date\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
       .signed_headers = "host;x-amz-date",
       .signature = "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
      {.name = "get_vanilla_empty_query_key",
       .method = "GET",
       .path = "/",
       .query = {{"Param1", "value1"}},
       .headers = {{"Host", "example.amazonaws.com"}},
       .canonical_request = "GET\n"
                            "/\n"
                            "Param1=value1\n"
                            "host:example.amazonaws.com\n"
                            "x-amz-date:20150830T123600Z\n"
                            "\n"
                            "host;x-amz-date\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "1e24db194ed7d0eec2de28d7369675a243488e08526e8c1c73571282f7c517ab",
       .signed_headers = "host;x-amz-date",
       .signature = "a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb"},
      {.name = "get_vanilla_query_order_key_case",
       .method = "GET",
       .path = "/",
       .query = {{"Param2", "value2"}, {"Param1", "value1"}},
       .headers = {{"Host", "example.amazonaws.com"}},
       .canonical_request = "GET\n"
                            "/\n"
                            "Param1=value1&Param2=value2\n"
                            "host:example.amazonaws.com\n"
                            "x-amz-date:20150830T123600Z\n"
                            "\n"
                            "host;x-amz-date\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0",
       .signed_headers = "host;x-amz-date",
       .signature = "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"},
      {.name = "get_vanilla_query_order_encoded",
       .method = "GET",
       .path = "/",
       .query = {{"Param-3", "Value3"}, {"Param", "Value2"}, {"\xE1\x88\xB4", "Value1"}},
       .headers = {{"Host", "example.amazonaws.com"}},
       .canonical_request = "GET\n"
                            "/\n"
                            "%E1%88%B4=Value1&Param=Value2&Param-3=Value3\n"
                            "host:example.amazonaws.com\n"
                            "x-amz-date:20150830T123600Z\n"
                            "\n"
                            "host;x-amz-date\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "868294f5c38bd141c4972a373a76654f1418a8e4fc18b2e7903ae45e8ae0ec71",
       .signed_headers = "host;x-amz-date",
       .signature = "371d3713e185cc334048618a97f809c9ffe339c62934c032af5a0e595648fcac"},
      {.name = "get_vanilla_query_unreserved",
       .method = "GET",
       .path = "/",
       .query = {{"-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
                  "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"}},
       .headers = {{"Host", "example.amazonaws.com"}},
       .canonical_request = "GET\n"
                            "/\n"
                            "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz=-._"
                            "~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz\n"
                            "host:example.amazonaws.com\n"
                            "x-amz-date:20150830T123600Z\n"
                            "\n"
                            "host;x-amz-date\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "c30d4703d9f799439be92736156d47ccfb2d879ddf56f5befa6d1d6aab979177",
       .signed_headers = "host;x-amz-date",
       .signature = "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197"},
      {.name = "get_vanilla_utf8_query",
       .method = "GET",
       .path = "/",
       .query = {{"\xE1\x88\xB4", "bar"}},
       .headers = {{"Host", "example.amazonaws.com"}},
       .canonical_request = "GET\n"
                            "/\n"
                            "%E1%88%B4=bar\n"
                            "host:example.amazonaws.com\n"
                            "x-amz-date:20150830T123600Z\n"
                            "\n"
                            "host;x-amz-date\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "eb30c5bed55734080471a834cc727ae56beb50e5f39d1bff6d0d38cb192a7073",
       .signed_headers = "host;x-amz-date",
       .signature = "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04"},
      {.name = "get_unreserved",
       .method = "GET",
       .path = "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
       .headers = {{"Host", "example.amazonaws.com"}},
       .canonical_request = "GET\n"
                            "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz\n"
                            "\n"
                            "host:example.amazonaws.com\n"
                            "x-amz-date:20150830T123600Z\n"
                            "\n"
                            "host;x-amz-date\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "6a968768eefaa713e2a6b16b589a8ea192661f098f37349f4e2c0082757446f9",
       .signed_headers = "host;x-amz-date",
       .signature = "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f"},
      {.name = "get_utf8",
       .method = "GET",
       .path = "/\xE1\x88\xB4",
       .headers = {{"Host", "example.amazonaws.com"}},
       .canonical_request = "GET\n"
                            "/%E1%88%B4\n"
                            "\n"
                            "host:example.amazonaws.com\n"
                            "x-amz-date:20150830T123600Z\n"
                            "\n"
                            "host;x-amz-date\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "2a0a97d02205e45ce2e994789806b19270cfbbb0921b278ccf58f5249ac42102",
       .signed_headers = "host;x-amz-date",
       .signature = "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85"},
      {.name = "get_space_normalized",
       .method = "GET",
       .path = "/example space/",
       .headers = {{"Host", "example.amazonaws.com"}},
       .canonical_request = "GET\n"
                            "/example%20space/\n"
                            "\n"
                            "host:example.amazonaws.com\n"
                            "x-amz-date:20150830T123600Z\n"
                            "\n"
                            "host;x-amz-date\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "63ee75631ed7234ae61b5f736dfc7754cdccfedbff4b5128a915706ee9390d86",
       .signed_headers = "host;x-amz-date",
       .signature = "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741"},
      {.name = "get_slash_normalized",
       .method = "GET",
       .path = "//",
       .headers = {{"Host", "example.amazonaws.com"}},
       .canonical_request = "GET\n"
                            "/\n"
                            "\n"
                            "host:example.amazonaws.com\n"
                            "x-amz-date:20150830T123600Z\n"
                            "\n"
                            "host;x-amz-date\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
       .signed_headers = "host;x-amz-date",
       .signature = "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
      {.name = "get_slashes_normalized",
       .method = "GET",
       .path = "//example//",
       .headers = {{"Host", "example.amazonaws.com"}},
       .canonical_request = "GET\n"
                            "/example/\n"
                            "\n"
                            "host:example.amazonaws.com\n"
                            "x-amz-date:20150830T123600Z\n"
                            "\n"
                            "host;x-amz-date\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "cb96b4ac96d501f7c5c15bc6d67b3035061cfced4af6585ad927f7e6c985c015",
       .signed_headers = "host;x-amz-date",
       .signature = "9a624bd73a37c9a373b5312afbebe7a714a789de108f0bdfe846570885f57e84"},
      {.name = "get_slash_dot_slash_normalized",
       .method = "GET",
       .path = "/./",
       .headers = {{"Host", "example.amazonaws.com"}},
       .canonical_request = "GET\n"
                            "/\n"
                            "\n"
                            "host:example.amazonaws.com\n"
                            "x-amz-date:20150830T123600Z\n"
                            "\n"
                            "host;x-amz-date\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
       .signed_headers = "host;x-amz-date",
       .signature = "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
      {.name = "get_slash_pointless_dot_normalized",
       .method = "GET",
       .path = "/./example",
       .headers = {{"Host", "example.amazonaws.com"}},
       .canonical_request = "GET\n"
                            "/example\n"
                            "\n"
                            "host:example.amazonaws.com\n"
                            "x-amz-date:20150830T123600Z\n"
                            "\n"
                            "host;x-amz-date\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "214d50c111a8edc4819da6a636336472c916b5240f51e9a51b5c3305180cf702",
       .signed_headers = "host;x-amz-date",
       .signature = "ef75d96142cf21edca26f06005da7988e4f8dc83a165a80865db7089db637ec5"},
      {.name = "get_relative_normalized",
       .method = "GET",
       .path = "/example/..",
       .headers = {{"Host", "example.amazonaws.com"}},
       .canonical_request = "GET\n"
                            "/\n"
                            "\n"
                            "host:example.amazonaws.com\n"
                            "x-amz-date:20150830T123600Z\n"
                            "\n"
                            "host;x-amz-date\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
       .signed_headers = "host;x-amz-date",
       .signature = "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
      {.name = "get_relative_relative_normalized",
       .method = "GET",
       .path = "/example1/example2/../..",
       .headers = {{"Host", "example.amazonaws.com"}},
       .canonical_request = "GET\n"
                            "/\n"
                            "\n"
                            "host:example.amazonaws.com\n"
                            "x-amz-date:20150830T123600Z\n"
                            "\n"
                            "host;x-amz-date\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
       .signed_headers = "host;x-amz-date",
       .signature = "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
      {.name = "get_header_key_duplicate",
       .method = "GET",
       .path = "/",
       .headers = {{"Host", "example.amazonaws.com"},
                   {"My-Header1", "value2"},
                   {"My-Header1", "value2"},
                   {"My-Header1", "value1"}},
       .canonical_request = "GET\n"
                            "/\n"
                            "\n"
                            "host:example.amazonaws.com\n"
                            "my-header1:value2,value2,value1\n"
                            "x-amz-date:20150830T123600Z\n"
                            "\n"
                            "host;my-header1;x-amz-date\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "dc7f04a3abfde8d472b0ab1a418b741b7c67174dad1551b4117b15527fbe966c",
       .signed_headers = "host;my-header1;x-amz-date",
       .signature = "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea"},
      {.name = "get_header_value_order",
       .method = "GET",
       .path = "/",
       .headers = {{"Host", "example.amazonaws.com"},
                   {"My-Header1", "value4"},
                   {"My-Header1", "value1"},
                   {"My-Header1", "value3"},
                   {"My-Header1", "value2"}},
       .canonical_request = "GET\n"
                            "/\n"
                            "\n"
                            "host:example.amazonaws.com\n"
                            "my-header1:value4,value1,value3,value2\n"
                            "x-amz-date:20150830T123600Z\n"
                            "\n"
                            "host;my-header1;x-amz-date\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "31ce73cd3f3d9f66977ad3dd957dc47af14df92fcd8509f59b349e9137c58b86",
       .signed_headers = "host;my-header1;x-amz-date",
       .signature = "08c7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01"},
      {.name = "get_header_value_trim",
       .method = "GET",
       .path = "/",
       .headers = {{"Host", "example.amazonaws.com"},
                   {"My-Header1", " value1"},
                   {"My-Header2", " \"a   b   c\""}},
       .canonical_request = "GET\n"
                            "/\n"
                            "\n"
                            "host:example.amazonaws.com\n"
                            "my-header1:value1\n"
                            "my-header2:\"a b c\"\n"
                            "x-amz-date:20150830T123600Z\n"
                            "\n"
                            "host;my-header1;my-header2;x-amz-date\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "a726db9b0df21c14f559d0a978e563112acb1b9e05476f0a6a1c7d68f28605c7",
       .signed_headers = "host;my-header1;my-header2;x-amz-date",
       .signature = "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736"},
      {.name = "get_header_value_multiline",
       .method = "GET",
       .path = "/",
       .headers = {{"Host", "example.amazonaws.com"},
                   {"My-Header1", "value1\n  value2\n     value3"}},
       .canonical_request = "GET\n"
                            "/\n"
                            "\n"
                            "host:example.amazonaws.com\n"
                            "my-header1:value1 value2 value3\n"
                            "x-amz-date:20150830T123600Z\n"
                            "\n"
                            "host;my-header1;x-amz-date\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "e99419459a677bc11de234014be3c4e72c1ea5b454ceb58b613061f5d7a162e8",
       .signed_headers = "host;my-header1;x-amz-date",
       .signature = "cfd34249e4b1c8d6b91ef74165d41a32e5fab3306300901bb65a51a73575eefd"},
      {.name = "get_vanilla_with_session_token",
       .method = "GET",
       .path = "/",
       .headers = {{"Host", "example.amazonaws.com"}},
       .session_token = "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267",
       .canonical_request =
           "GET\n"
           "/\n"
           "\n"
           "host:example.amazonaws.com\n"
           "x-amz-date:20150830T123600Z\n"
           "x-amz-security-token:6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267\n"
           "\n"
           "host;x-amz-date;x-amz-security-token\n"
           "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "067b36aa60031588cea4a4cde1f21215227a047690c72247f1d70b32fbbfad2b",
       .signed_headers = "host;x-amz-date;x-amz-security-token",
       .signature = "07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8"},
      {.name = "post_vanilla",
       .method = "POST",
       .path = "/",
       .headers = {{"Host", "example.amazonaws.com"}},
       .canonical_request = "POST\n"
                            "/\n"
                            "\n"
                            "host:example.amazonaws.com\n"
                            "x-amz-date:20150830T123600Z\n"
                            "\n"
                            "host;x-amz-date\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "553f88c9e4d10fc9e109e2aeb65f030801b70c2f6468faca261d401ae622fc87",
       .signed_headers = "host;x-amz-date",
       .signature = "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"},
      {.name = "post_vanilla_query",
       .method = "POST",
       .path = "/",
       .query = {{"Param1", "value1"}},
       .headers = {{"Host", "example.amazonaws.com"}},
       .canonical_request = "POST\n"
                            "/\n"
                            "Param1=value1\n"
                            "host:example.amazonaws.com\n"
                            "x-amz-date:20150830T123600Z\n"
                            "\n"
                            "host;x-amz-date\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "9d659678c1756bb3113e2ce898845a0a79dbbc57b740555917687f1b3340fbbd",
       .signed_headers = "host;x-amz-date",
       .signature = "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11"},
      {.name = "post_vanilla_empty_query_value",
       .method = "POST",
       .path = "/",
       .query = {{"Param1", "value1"}},
       .headers = {{"Host", "example.amazonaws.com"}},
       .canonical_request = "POST\n"
                            "/\n"
                            "Param1=value1\n"
                            "host:example.amazonaws.com\n"
                            "x-amz-date:20150830T123600Z\n"
                            "\n"
                            "host;x-amz-date\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "9d659678c1756bb3113e2ce898845a0a79dbbc57b740555917687f1b3340fbbd",
       .signed_headers = "host;x-amz-date",
       .signature = "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11"},
      {.name = "post_header_key_case",
       .method = "POST",
       .path = "/",
       .headers = {{"Host", "example.amazonaws.com"}},
       .canonical_request = "POST\n"
                            "/\n"
                            "\n"
                            "host:example.amazonaws.com\n"
                            "x-amz-date:20150830T123600Z\n"
                            "\n"
                            "host;x-amz-date\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "553f88c9e4d10fc9e109e2aeb65f030801b70c2f6468faca261d401ae622fc87",
       .signed_headers = "host;x-amz-date",
       .signature = "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"},
      {.name = "post_header_key_sort",
       .method = "POST",
       .path = "/",
       .headers = {{"Host", "example.amazonaws.com"}, {"My-Header1", "value1"}},
       .canonical_request = "POST\n"
                            "/\n"
                            "\n"
                            "host:example.amazonaws.com\n"
                            "my-header1:value1\n"
                            "x-amz-date:20150830T123600Z\n"
                            "\n"
                            "host;my-header1;x-amz-date\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "9368318c2967cf6de74404b30c65a91e8f6253e0a8659d6d5319f1a812f87d65",
       .signed_headers = "host;my-header1;x-amz-date",
       .signature = "c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c"},
      {.name = "post_header_value_case",
       .method = "POST",
       .path = "/",
       .headers = {{"Host", "example.amazonaws.com"}, {"My-Header1", "VALUE1"}},
       .canonical_request = "POST\n"
                            "/\n"
                            "\n"
                            "host:example.amazonaws.com\n"
                            "my-header1:VALUE1\n"
                            "x-amz-date:20150830T123600Z\n"
                            "\n"
                            "host;my-header1;x-amz-date\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "d51ced243e649e3de6ef63afbbdcbca03131a21a7103a1583706a64618606a93",
       .signed_headers = "host;my-header1;x-amz-date",
       .signature = "cdbc9802e29d2942e5e10b5bccfdd67c5f22c7c4e8ae67b53629efa58b974b7d"},
      {.name = "post_x_www_form_urlencoded",
       .method = "POST",
       .path = "/",
       .headers = {{"Content-Type", "application/x-www-form-urlencoded"},
                   {"Host", "example.amazonaws.com"},
                   {"Content-Length", "13"}},
       .body = "Param1=value1",
       .add_content_sha256 = true,
       .canonical_request =
           "POST\n"
           "/\n"
           "\n"
           "content-length:13\n"
           "content-type:application/x-www-form-urlencoded\n"
           "host:example.amazonaws.com\n"
           "x-amz-content-sha256:9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e\n"
           "x-amz-date:20150830T123600Z\n"
           "\n"
           "content-length;content-type;host;x-amz-content-sha256;x-amz-date\n"
           "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "b1edd1d03544c25390e32085d55b57acc9a3961bb59415ff86c45c3d89d16cfb",
       .signed_headers = "content-length;content-type;host;x-amz-content-sha256;x-amz-date",
       .signature = "d3875051da38690788ef43de4db0d8f280229d82040bfac253562e56c3f20e0b"},
      {.name = "post_x_www_form_urlencoded_parameters",
       .method = "POST",
       .path = "/",
       .headers = {{"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"},
                   {"Host", "example.amazonaws.com"},
                   {"Content-Length", "13"}},
       .body = "Param1=value1",
       .add_content_sha256 = true,
       .canonical_request =
           "POST\n"
           "/\n"
           "\n"
           "content-length:13\n"
           "content-type:application/x-www-form-urlencoded; charset=utf-8\n"
           "host:example.amazonaws.com\n"
           "x-amz-content-sha256:9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e\n"
           "x-amz-date:20150830T123600Z\n"
           "\n"
           "content-length;content-type;host;x-amz-content-sha256;x-amz-date\n"
           "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "a89f1a5b53e37702ee6363ce1da3ce8f54386f3c8f352ae652153c2982a0bc4d",
       .signed_headers = "content-length;content-type;host;x-amz-content-sha256;x-amz-date",
       .signature = "328d1b9eaadca9f5818ef05e8392801e091653bafec24fcab71e7344e7f51422"},
      {.name = "post_sts_header_before",
       .method = "POST",
       .path = "/",
       .headers = {{"Host", "example.amazonaws.com"}},
       .session_token = kStsToken,
       .canonical_request = "POST\n"
                            "/\n"
                            "\n"
                            "host:example.amazonaws.com\n"
                            "x-amz-date:20150830T123600Z\n"
                            "x-amz-security-token:AQoDYXdzEPT//////////"
                            "wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRXmxfpS"
                            "PfIeoIYRqTflfKD8YUuwthAx7mSEI/qkPpKPi/"
                            "kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQDYwT7WZ0wq5VSXDvp75"
                            "YU9HFvlRd8Tx6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZbqBAz+"
                            "scqKmlzm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJabIQwj2ICCR/oLxBA==\n"
                            "\n"
                            "host;x-amz-date;x-amz-security-token\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "c237e1b440d4c63c32ca95b5b99481081cb7b13c7e40434868e71567c1a882f6",
       .signed_headers = "host;x-amz-date;x-amz-security-token",
       .signature = "85d96828115b5dc0cfc3bd16ad9e210dd772bbebba041836c64533a82be05ead"},
      {.name = "post_sts_header_after",
       .method = "POST",
       .path = "/",
       .headers = {{"Host", "example.amazonaws.com"}},
       .session_token = kStsToken,
       .sign_session_token = false,
       .canonical_request = "POST\n"
                            "/\n"
                            "\n"
                            "host:example.amazonaws.com\n"
                            "x-amz-date:20150830T123600Z\n"
                            "\n"
                            "host;x-amz-date\n"
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       .string_to_sign = "AWS4-HMAC-SHA256\n"
                         "20150830T123600Z\n"
                         "20150830/us-east-1/service/aws4_request\n"
                         "553f88c9e4d10fc9e109e2aeb65f030801b70c2f6468faca261d401ae622fc87",
       .signed_headers = "host;x-amz-date",
       .signature = "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"},
  };
  return cases;
}

}  // namespace outbox::aws::test
