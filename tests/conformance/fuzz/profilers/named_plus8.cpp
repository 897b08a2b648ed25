// named_plus8: tracks only the objects of the class named "Contoso.Orders.OrderLine" (named.h) and remaps them
// at MovedReferences2 eight bytes too far (MR2-08): found as MR2-17 once such an object moves and is inspected.
#include "named.h"

using namespace fixture;

namespace {

class Plus8 final : public NamedTracker<8> {};

}  // namespace

FIXTURE_EXPORT(Plus8)
