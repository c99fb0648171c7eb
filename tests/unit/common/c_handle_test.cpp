// CHandle: the C library's free function runs once, for a handle that is not null.
#include "outbox/common/c_handle.hpp"

#include <gtest/gtest.h>

namespace outbox::common {
namespace {

int g_freed = 0;
struct Thing {
  int id;
};
void free_thing(Thing* t) {
  ++g_freed;
  delete t;
}
void free_any(void* p) {
  ++g_freed;
  delete static_cast<Thing*>(p);
}

TEST(CHandle, FreesOnceAndNeverANull) {
  g_freed = 0;
  {
    CHandle<Thing, free_thing> a(new Thing{1});
    CHandle<Thing, free_thing> none;
    CHandle<Thing, free_thing> moved = std::move(a);
    EXPECT_EQ(moved->id, 1);
  }
  EXPECT_EQ(g_freed, 1);
}

TEST(CHandle, TakesAFreeFunctionOfVoidPointer) {  // as PQfreemem
  g_freed = 0;
  { CHandle<Thing, free_any> h(new Thing{2}); }
  EXPECT_EQ(g_freed, 1);
}

}  // namespace
}  // namespace outbox::common
