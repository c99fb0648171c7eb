// A relation's schema-qualified name prints one way everywhere.
#include "outbox/common/qualified_name.hpp"

#include <gtest/gtest.h>

namespace outbox::common {
namespace {

TEST(QualifiedName, TextIsSchemaDotName) {
  EXPECT_EQ((QualifiedName{"public", "outbox"}.text()), "public.outbox");
  // Unquoted: a name with a dot or a quote is printed as it is (SQL quoting is pg's).
  EXPECT_EQ((QualifiedName{"a.b", "we\"ird"}.text()), "a.b.we\"ird");
  EXPECT_EQ((QualifiedName{"s", "t"}), (QualifiedName{"s", "t"}));
}

}  // namespace
}  // namespace outbox::common
