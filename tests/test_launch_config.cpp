// LaunchConfig (src/runtime/cuda_check.h): the attributes a launch carries. Host only, no device needed.
#include <gtest/gtest.h>

#include "runtime/cuda_check.h"

namespace qdec {
namespace {

const cudaLaunchAttribute* find(const cudaLaunchConfig_t* c, cudaLaunchAttributeID id) {
  for (unsigned i = 0; i < c->numAttrs; ++i)
    if (c->attrs[i].id == id) return &c->attrs[i];
  return nullptr;
}

TEST(LaunchConfig, ProgrammaticAndCluster) {
  LaunchConfig plain(dim3(8, 1, 4), dim3(256), 1024, nullptr, false);
  EXPECT_EQ(plain.get()->numAttrs, 0u);
  EXPECT_EQ(plain.get()->gridDim.z, 4u);
  EXPECT_EQ(plain.get()->blockDim.x, 256u);
  EXPECT_EQ(plain.get()->dynamicSmemBytes, 1024u);

  LaunchConfig pdl(dim3(8, 1, 4), dim3(256), 0, nullptr, true);
  ASSERT_EQ(pdl.get()->numAttrs, 1u);
  const cudaLaunchAttribute* a = find(pdl.get(), cudaLaunchAttributeProgrammaticStreamSerialization);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->val.programmaticStreamSerializationAllowed, 1);

  pdl.set_cluster(dim3(1, 1, 4));
  ASSERT_EQ(pdl.get()->numAttrs, 2u);
  a = find(pdl.get(), cudaLaunchAttributeClusterDimension);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->val.clusterDim.x, 1u);
  EXPECT_EQ(a->val.clusterDim.z, 4u);
  EXPECT_NE(find(pdl.get(), cudaLaunchAttributeProgrammaticStreamSerialization), nullptr);

  pdl.set_cluster(dim3(1, 1, 2));  // replaces, does not add
  ASSERT_EQ(pdl.get()->numAttrs, 2u);
  EXPECT_EQ(find(pdl.get(), cudaLaunchAttributeClusterDimension)->val.clusterDim.z, 2u);

  plain.set_cluster(dim3(2, 1, 1));
  ASSERT_EQ(plain.get()->numAttrs, 1u);
  EXPECT_EQ(find(plain.get(), cudaLaunchAttributeClusterDimension)->val.clusterDim.x, 2u);
}

}  // namespace
}  // namespace qdec
