// Inception-V3 pool features for FID on ImageNet-scale runs: the FID variant of the network (the
// one the community's TensorFlow and PyTorch FID code run), from weights the user converts with
// tools/convert_inception.py, and reference statistics read from a .npz of mu/sigma as published
// by those evaluation suites. Runs on a Backend ("cpu" or "cuda", in fp32): convolutions with the
// BatchNorm folded in, pools, the bilinear resize and channel concatenation are its primitives.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "eval/fid.h"

namespace dit::eval {

inline constexpr int kInceptionFeatures = 2048;  // the global-average-pool ("pool_3") width
inline constexpr int kInceptionInput = 299;      // images are resized to 299 x 299 first
inline constexpr int kInceptionBatch = 32;       // images through the network at a time (inception_features)

// One convolution of the network: (k, c, kh, kw), stride, zero padding (ph, pw).
struct InceptionConvSpec {
  std::string name;  // torchvision's module name, e.g. "Mixed_6b.branch7x7_2"
  int c = 0, k = 0, kh = 1, kw = 1, stride = 1, ph = 0, pw = 0;
};
// Every convolution of the feature path (94), in network order.
const std::vector<InceptionConvSpec>& inception_conv_specs();

class InceptionV3 {
 public:
  // Reads a file written by tools/convert_inception.py: the seal is verified first, every tensor's
  // shape is checked (one line naming the file and the tensor), and each BatchNorm (eps 1e-3) is
  // folded into its convolution (weight * gamma / sqrt(var + eps), bias beta - mean * that scale).
  static InceptionV3 load(const std::string& path);

  // Pool features (n, 2048) of images (n, channels, h, w) float32 in [-1, 1], channels 1 (repeated
  // to RGB) or 3, any size (resized bilinearly to 299 x 299, align_corners=False), computed on the
  // backend `backend` names (make_backend: "cpu", "cuda") in fp32. `batch` images go through the
  // network at a time (memory: about 17 MB of activations per image, plus 87 MB of weights).
  Features features(const float* images, int n, int channels, int h, int w, int batch = kInceptionBatch,
                    const std::string& backend = "cpu") const;

  // A convolution with its BatchNorm folded in.
  struct Conv {
    InceptionConvSpec spec;
    std::vector<float> weight;  // (k, c, kh, kw)
    std::vector<float> bias;    // (k)
  };

 private:
  std::map<std::string, Conv> convs_;
};

// One call for the evaluate command: load the weights and return the features of `images`
// ((n, c, h, w) float32 in [-1, 1]), kInceptionBatch at a time, on the CPU backend or on the one
// `backend` names ("cpu" or "cuda").
Features inception_features(const std::string& weights_h5, const std::vector<float>& images, int n, int c, int h,
                            int w);
Features inception_features(const std::string& weights_h5, const std::vector<float>& images, int n, int c, int h,
                            int w, const std::string& backend);

// FID reference statistics from a .npz holding `mu` (f,) and `sigma` (f, f), float32 or float64,
// stored (np.savez) or deflated (np.savez_compressed), as the FID suites publish them. Errors name
// the file and the array: missing, wrong shape, non-finite, truncated or damaged.
Gaussian load_reference_npz(const std::string& path, std::int64_t expected_features = kInceptionFeatures);

}  // namespace dit::eval
