// named_correct: named_plus8 without its error (named.h): tracks only the objects of the class named
// "Contoso.Orders.OrderLine" and remaps them as MR2-07/08 say.
#include "named.h"

using namespace fixture;

namespace {

class Named final : public NamedTracker<0> {};

}  // namespace

FIXTURE_EXPORT(Named)
