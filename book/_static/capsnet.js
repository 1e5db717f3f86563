/* capsnet.js: the CapsNet computed in the page (book/appendix_inpage), in plain JavaScript (no library).

   - Weights: two files written when the book is built (capsedu/figures/inpage.py), fetched
     only when the reader asks: the decoder (float16) and the encoder (int8 + scales).
   - decode(): the decoder, 16-D capsule of one class -> 512 -> 1024 -> 784 pixels.
   - capsnet(): the whole forward pass: conv1, the primary capsules, the 1,152 x 10 votes
     u_hat = W_ij u_i, and dynamic routing (3 iterations), as capsedu.core does it.
   - mnistLike(): a drawing -> 28 x 28 as MNIST's digits are made: the digit scaled into a
     20 x 20 box, then placed so that its centre of mass is the image's centre.
   - The panel: 16 sliders over a capsule, and a canvas to draw on.
   - Explorer(): routing at work on the digit just drawn: the primary capsules, one class's votes
     on their 2 principal axes with dots sized by c_ij at each iteration, one capsule's c_i.
   - The view (digit, sliders, the input run, the explorer's selection) is kept in the URL's
     fragment by capsedu.js's capseduState, and restored from it when the page opens.
   Shapes in comments: C channels, O outputs, K kernel, i input capsule, j output capsule. */
(function () {
  "use strict";
  var BASE = document.currentScript.src.replace(/[^/]*$/, "");   // the folder this file came from

  // ------------------------------------------------------------------ weight files
  function half(h) {                                   // IEEE float16 bits -> number
    var sign = h & 0x8000 ? -1 : 1, e = (h >> 10) & 31, f = h & 1023;
    if (e === 0) { return sign * f * Math.pow(2, -24); }
    if (e === 31) { return f ? NaN : sign * Infinity; }
    return sign * (1 + f / 1024) * Math.pow(2, e - 15);
  }

  function parseWeights(buffer) {                      // layout: see capsedu/figures/inpage.py
    var view = new DataView(buffer), length = view.getUint32(0, true);
    var header = JSON.parse(new TextDecoder().decode(new Uint8Array(buffer, 4, length)));
    var base = 4 + length, tensors = {};
    Object.keys(header.tensors).forEach(function (name) {
      var e = header.tensors[name], n = e.shape.reduce(function (a, b) { return a * b; }, 1);
      var w = new Float32Array(n), k;
      if (e.dtype === "int8") {                        // w = q * scale, one scale per group of rows
        var q = new Int8Array(buffer, base + e.offset, n);
        var groups = e.shape.slice(0, e.scale_axes).reduce(function (a, b) { return a * b; }, 1);
        var scale = new Float32Array(buffer, base + e.scale_offset, groups), size = n / groups;
        for (k = 0; k < n; k++) { w[k] = q[k] * scale[Math.floor(k / size)]; }
      } else {
        var h = new Uint16Array(buffer, base + e.offset, n);
        for (k = 0; k < n; k++) { w[k] = half(h[k]); }
      }
      tensors[name] = {shape: e.shape, data: w};
    });
    return {config: header.config, tensors: tensors};
  }

  function fetchWeights(name) {
    return fetch(BASE + name).then(function (r) {
      if (!r.ok) { throw new Error(name + ": HTTP " + r.status); }
      return r.arrayBuffer();
    }).then(parseWeights);
  }

  // ------------------------------------------------------------------ the maths
  // y = W x + b for W (O, I) row-major (PyTorch's Linear); x may be sparse (zeros are skipped).
  function linear(W, b, x, relu) {
    var O = b.length, I = x.length, y = new Float32Array(O);
    for (var o = 0; o < O; o++) {
      var sum = b[o], row = o * I;
      for (var i = 0; i < I; i++) { if (x[i] !== 0) { sum += W[row + i] * x[i]; } }
      y[o] = relu && sum < 0 ? 0 : sum;
    }
    return y;
  }

  // The decoder sees all 10 capsules with every class but `label` masked to zero.
  function decode(dec, capsule, label) {
    var t = dec.tensors, D = capsule.length, x = new Float32Array(dec.config.num_classes * D);
    x.set(capsule, label * D);
    var h = linear(t["decoder.net.0.weight"].data, t["decoder.net.0.bias"].data, x, true);      // (512)
    h = linear(t["decoder.net.2.weight"].data, t["decoder.net.2.bias"].data, h, true);          // (1024)
    var p = linear(t["decoder.net.4.weight"].data, t["decoder.net.4.bias"].data, h, false);     // (784)
    for (var k = 0; k < p.length; k++) { p[k] = 1 / (1 + Math.exp(-p[k])); }                  // sigmoid
    return p;
  }

  // Convolution (no padding) as one matrix product: every K x K patch of the (C, H, W) input is
  // a row of C*K*K numbers, in the order of the weight's (O, C, K, K) rows. Returns (O, H', W').
  function conv2d(x, C, H, W, weight, bias, stride, relu) {
    var O = weight.shape[0], K = weight.shape[2], w = weight.data, L = C * K * K;
    var Ho = Math.floor((H - K) / stride) + 1, Wo = Math.floor((W - K) / stride) + 1, P = Ho * Wo;
    var patches = new Float32Array(P * L);                                    // (P, C*K*K)
    for (var oy = 0; oy < Ho; oy++) {
      for (var ox = 0; ox < Wo; ox++) {
        var row = (oy * Wo + ox) * L;
        for (var c = 0; c < C; c++) {
          for (var ky = 0; ky < K; ky++) {
            var src = c * H * W + (oy * stride + ky) * W + ox * stride, dst = row + (c * K + ky) * K;
            for (var kx = 0; kx < K; kx++) { patches[dst + kx] = x[src + kx]; }
          }
        }
      }
    }
    // Four patches at a time, so that each weight read from memory serves four products.
    var y = new Float32Array(O * P), sums = new Float64Array(4);
    for (var o = 0; o < O; o++) {
      var a = o * L;
      for (var p = 0; p < P; p += 4) {
        var n = Math.min(4, P - p), b0 = p * L, b1 = b0 + L, b2 = b1 + L, b3 = b2 + L;
        var s0 = 0, s1 = 0, s2 = 0, s3 = 0, k, wk;
        if (n === 4) {
          for (k = 0; k < L; k++) {
            wk = w[a + k];
            s0 += wk * patches[b0 + k]; s1 += wk * patches[b1 + k]; s2 += wk * patches[b2 + k]; s3 += wk * patches[b3 + k];
          }
        } else {
          for (k = 0; k < L; k++) { s0 += w[a + k] * patches[b0 + k]; }
          for (k = 0; n > 1 && k < L; k++) { s1 += w[a + k] * patches[b1 + k]; }
          for (k = 0; n > 2 && k < L; k++) { s2 += w[a + k] * patches[b2 + k]; }
        }
        sums[0] = s0; sums[1] = s1; sums[2] = s2; sums[3] = s3;
        for (var q = 0; q < n; q++) {
          var v = sums[q] + bias.data[o];
          y[o * P + p + q] = relu && v < 0 ? 0 : v;
        }
      }
    }
    return {data: y, C: O, H: Ho, W: Wo};
  }

  // squash(s) = |s|^2 / (k + |s|^2) * s / |s|, in place on v[at .. at+D).
  function squash(v, at, D, k) {
    var n2 = 0, d;
    for (d = 0; d < D; d++) { n2 += v[at + d] * v[at + d]; }
    var gain = Math.sqrt(n2) / (k + n2);
    for (d = 0; d < D; d++) { v[at + d] *= gain; }
  }

  function norm(v, at, D) {
    var n2 = 0;
    for (var d = 0; d < D; d++) { n2 += v[at + d] * v[at + d]; }
    return Math.sqrt(n2 + 1e-8);                                              // safe_norm's eps
  }

  // image (784) in [0, 1] -> {capsules (J*D), lengths (J), coupling (N*J, last iteration), label,
  // and what routing worked on: primary capsules, votes, each iteration's c and v}
  function capsnet(enc, image) {
    var t = enc.tensors, cfg = enc.config, side = cfg.image_size;
    var f = conv2d(image, 1, side[0], side[1], t["conv1.weight"], t["conv1.bias"], 1, true);
    var g = conv2d(f.data, f.C, f.H, f.W, t["primary.conv.weight"], t["primary.conv.bias"], cfg.primary_stride, false);
    // Channel t*E + e of the (T*E, H, W) map is dimension e of capsule type t at each grid cell.
    var T = cfg.primary_types, E = cfg.primary_dim, G = g.H * g.W, N = T * G, n, e, j, d, i;
    var u = new Float32Array(N * E);                                          // (N, E), N = 1,152
    for (var type = 0; type < T; type++) {
      for (var cell = 0; cell < G; cell++) {
        n = type * G + cell;
        for (e = 0; e < E; e++) { u[n * E + e] = g.data[(type * E + e) * G + cell]; }
        squash(u, n * E, E, cfg.squash_k);
      }
    }
    // Votes u_hat[j][i] = W_ij u_i, with W (N, J, D, E): (J, N, D)
    var J = cfg.num_classes, D = cfg.digit_dim, W = t["digits.weight"].data;
    var uhat = new Float32Array(J * N * D);
    for (i = 0; i < N; i++) {
      for (j = 0; j < J; j++) {
        for (d = 0; d < D; d++) {
          var sum = 0, w = ((i * J + j) * D + d) * E;
          for (e = 0; e < E; e++) { sum += W[w + e] * u[i * E + e]; }
          uhat[(j * N + i) * D + d] = sum;
        }
      }
    }
    // Dynamic routing: b_ij = 0; c_i = softmax_j(b_i); s_j = sum_i c_ij u_hat; v_j = squash(s_j);
    // b_ij += <u_hat_j|i, v_j> (Hinton) or b_ij = <u_hat_j|i, v_j> (Su).
    var b = new Float32Array(N * J), c = new Float32Array(N * J), v = new Float32Array(J * D);
    var couplings = [], routed = [];                    // every iteration's c and v: the explorer's
    for (var r = 0; r < cfg.iterations; r++) {
      for (i = 0; i < N; i++) {                                               // softmax over j
        var max = -Infinity, total = 0;
        for (j = 0; j < J; j++) { max = Math.max(max, b[i * J + j]); }
        for (j = 0; j < J; j++) { c[i * J + j] = Math.exp(b[i * J + j] - max); total += c[i * J + j]; }
        for (j = 0; j < J; j++) { c[i * J + j] /= total; }
      }
      couplings.push(c.slice());
      v.fill(0);
      for (j = 0; j < J; j++) {
        for (i = 0; i < N; i++) {
          var cij = c[i * J + j], at = (j * N + i) * D;
          for (d = 0; d < D; d++) { v[j * D + d] += cij * uhat[at + d]; }
        }
        squash(v, j * D, D, cfg.squash_k);
      }
      routed.push(v.slice());
      if (r === cfg.iterations - 1) { break; }                                // the last update is unused
      for (j = 0; j < J; j++) {
        for (i = 0; i < N; i++) {
          var agree = 0, a = (j * N + i) * D;
          for (d = 0; d < D; d++) { agree += uhat[a + d] * v[j * D + d]; }
          b[i * J + j] = cfg.routing === "su" ? agree : b[i * J + j] + agree;
        }
      }
    }
    var lengths = [], label = 0;
    for (j = 0; j < J; j++) {
      lengths.push(norm(v, j * D, D));
      if (lengths[j] > lengths[label]) { label = j; }
    }
    // primary (N, E), votes (J, N, D), couplings[r] (N, J), routed[r] (J, D): for the explorer
    return {capsules: v, lengths: lengths, coupling: c, label: label, types: T, cells: G,
            primary: u, votes: uhat, couplings: couplings, routed: routed};
  }

  // ------------------------------------------------------------------ MNIST-like input
  // The ink of a drawing canvas -> 784 values in [0, 1], or null when nothing is drawn.
  function mnistLike(canvas) {
    var w = canvas.width, h = canvas.height, ink = canvas.getContext("2d").getImageData(0, 0, w, h).data;
    var x0 = w, y0 = h, x1 = -1, y1 = -1, x, y;
    for (y = 0; y < h; y++) {
      for (x = 0; x < w; x++) {
        if (ink[(y * w + x) * 4] > 0) { x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y); }
      }
    }
    if (x1 < 0) { return null; }
    var bw = x1 - x0 + 1, bh = y1 - y0 + 1, scale = 20 / Math.max(bw, bh);   // longer side -> 20 px
    var sw = Math.max(1, Math.round(bw * scale)), sh = Math.max(1, Math.round(bh * scale));
    var small = document.createElement("canvas");
    small.width = sw; small.height = sh;
    var ctx = small.getContext("2d");
    ctx.imageSmoothingQuality = "high";                                       // anti-aliased, as MNIST's
    ctx.drawImage(canvas, x0, y0, bw, bh, 0, 0, sw, sh);
    var px = ctx.getImageData(0, 0, sw, sh).data, mass = 0, mx = 0, my = 0;
    for (y = 0; y < sh; y++) {
      for (x = 0; x < sw; x++) { var p = px[(y * sw + x) * 4] / 255; mass += p; mx += p * x; my += p * y; }
    }
    var dx = Math.round(14 - mx / mass), dy = Math.round(14 - my / mass);    // centre of mass -> (14, 14)
    var out = new Float32Array(784);
    for (y = 0; y < sh; y++) {
      for (x = 0; x < sw; x++) {
        var tx = x + dx, ty = y + dy;
        if (tx >= 0 && tx < 28 && ty >= 0 && ty < 28) { out[ty * 28 + tx] = px[(y * sw + x) * 4] / 255; }
      }
    }
    return out;
  }

  // ------------------------------------------------------------------ drawing helpers
  function show(canvas, pixels) {                      // 784 values in [0, 1] -> a 28 x 28 grey canvas
    var ctx = canvas.getContext("2d"), img = ctx.createImageData(28, 28);
    for (var k = 0; k < 784; k++) {
      var g = Math.round(Math.min(1, Math.max(0, pixels[k])) * 255);
      img.data[4 * k] = img.data[4 * k + 1] = img.data[4 * k + 2] = g;
      img.data[4 * k + 3] = 255;
    }
    ctx.putImageData(img, 0, 0);
  }

  function bytesToImages(b64) {                        // base64 of N*784 uint8 -> [Float32Array(784)]
    var raw = atob(b64), out = [];
    for (var n = 0; n < raw.length / 784; n++) {
      var img = new Float32Array(784);
      for (var k = 0; k < 784; k++) { img[k] = raw.charCodeAt(n * 784 + k) / 255; }
      out.push(img);
    }
    return out;
  }

  // A drawn digit in the URL: its 784 grey levels quantised to 4 bits, two to a byte, in base64url
  // (523 characters). The network reads the quantised digit, so that a reload shows the same.
  function pack(pixels) {
    var bytes = "", q = function (p) { return Math.round(Math.min(1, Math.max(0, p)) * 15); };
    for (var k = 0; k < 784; k += 2) { bytes += String.fromCharCode(q(pixels[k]) * 16 + q(pixels[k + 1])); }
    return btoa(bytes).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }
  function unpack(text) {
    var bytes = atob(text.replace(/-/g, "+").replace(/_/g, "/")), out = new Float32Array(784);
    if (bytes.length !== 392) { throw new Error("not a packed digit"); }
    for (var k = 0; k < 784; k++) { var b = bytes.charCodeAt(k >> 1); out[k] = (k & 1 ? b & 15 : b >> 4) / 15; }
    return out;
  }

  function el(tag, attrs, parent, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) { node.textContent = text; }
    if (parent) { parent.appendChild(node); }
    return node;
  }

  function mb(bytes) { return (bytes / 1e6).toFixed(1) + " MB"; }

  // ------------------------------------------------------------------ the vote explorer
  // The two directions along which the N votes x (N, D) spread most: the top 2 eigenvectors of
  // their D x D covariance, by power iteration, the second after deflating the first.
  function principalAxes(x, N, D) {
    var mean = new Float64Array(D), C = new Float64Array(D * D), axes = [], i, a, b, k, it;
    for (i = 0; i < N; i++) { for (a = 0; a < D; a++) { mean[a] += x[i * D + a] / N; } }
    for (i = 0; i < N; i++) {
      for (a = 0; a < D; a++) {
        var da = x[i * D + a] - mean[a];
        for (b = 0; b < D; b++) { C[a * D + b] += da * (x[i * D + b] - mean[b]) / N; }
      }
    }
    for (k = 0; k < 2; k++) {
      var e = new Float64Array(D), y = new Float64Array(D);
      for (a = 0; a < D; a++) { e[a] = 1 + a / D; }                          // any start not orthogonal
      for (it = 0; it < 300; it++) {
        var n2 = 0;
        for (a = 0; a < D; a++) { y[a] = 0; for (b = 0; b < D; b++) { y[a] += C[a * D + b] * e[b]; } }
        if (k === 1) {                                  // keep it orthogonal to the first, against rounding
          var dot = 0;
          for (a = 0; a < D; a++) { dot += y[a] * axes[0][a]; }
          for (a = 0; a < D; a++) { y[a] -= dot * axes[0][a]; }
        }
        for (a = 0; a < D; a++) { n2 += y[a] * y[a]; }
        if (n2 === 0) { break; }
        for (a = 0; a < D; a++) { e[a] = y[a] / Math.sqrt(n2); }
      }
      var lambda = 0;
      for (a = 0; a < D; a++) { for (b = 0; b < D; b++) { lambda += e[a] * C[a * D + b] * e[b]; } }
      for (a = 0; a < D; a++) { for (b = 0; b < D; b++) { C[a * D + b] -= lambda * e[a] * e[b]; } }
      axes.push(e);
    }
    return {mean: mean, axes: axes};
  }

  function big(n) { return n.toLocaleString("en"); }   // 1152 -> "1,152"

  function angle(x, at, v, vat, D) {                    // degrees between x[at..] and v[vat..]
    var dot = 0;
    for (var d = 0; d < D; d++) { dot += x[at + d] * v[vat + d]; }
    return Math.acos(Math.max(-1, Math.min(1, dot / (norm(x, at, D) * norm(v, vat, D))))) * 180 / Math.PI;
  }

  // Routing at work on the digit just read (res: capsnet()'s result): the primary capsules, one
  // to select; one class's votes with dots sized by c_ij at one iteration; the selected
  // capsule's c_i and vote lengths. Starts at the view ``start`` ({j, r, i}) where it fits;
  // ``changed`` hears every move. Returns its state (which the browser test reads).
  function Explorer(box, res, start, changed) {
    var J = res.lengths.length, D = res.capsules.length / J, T = res.types, G = res.cells, N = T * G;
    var E = res.primary.length / N, R = res.couplings.length, side = Math.round(Math.sqrt(G));
    var PER_ROW = 8, CELL = 6, PITCH = side * CELL + 4, TOP = 20, i, j;
    var lengths = new Float32Array(N), view = {j: res.label, r: R, i: 0, lengths: lengths, radii: null};
    var shortest = Infinity;
    for (i = 0; i < N; i++) {                           // start on the longest primary capsule
      lengths[i] = norm(res.primary, i * E, E);
      if (lengths[i] > lengths[view.i]) { view.i = i; }
      shortest = Math.min(shortest, lengths[i]);
    }
    var longest = lengths[view.i], span = Math.max(longest - shortest, 1e-6);
    if (start && start.j >= 0 && start.j < J && start.r >= 1 && start.r <= R && start.i >= 0 && start.i < N) {
      view.j = start.j; view.r = start.r; view.i = start.i;
    }
    box.textContent = "";
    el("strong", {}, box, "Routing at work on this digit");
    el("p", {"class": "ci-x-note"}, box, "Left: the " + big(N) + " primary capsules, one " + side + " \u00d7 " + side +
       " tile per type (" + T + " types), darker when longer (white: " +
       shortest.toFixed(2) + ", this digit's shortest; black: " + longest.toFixed(2) + "); click one to select it. Below: each dot is one " +
       "primary capsule's vote \u00fb_j|i for class j, seen along the two directions in which this digit's " + big(N) +
       " votes for j spread most (they do not change between iterations; only c and v do). A dot's radius is " +
       "proportional to c_ij; the red cross is v_j after the iteration (grey: earlier ones), the line runs " +
       "from 0 to it, and the ringed dot is the selected capsule's vote.");
    var top = el("div", {"class": "ci-row"}, box);
    var grid = el("canvas", {"class": "ci-x-grid", width: PER_ROW * PITCH - 4, height: Math.ceil(T / PER_ROW) * PITCH - 4,
                             title: "the primary capsules: click one"}, top);
    var controls = el("div", {}, top);
    var pick = el("select", {"class": "ci-x-class", "aria-label": "class j"}, el("label", {}, el("div", {}, controls), "class j "));
    for (j = 0; j < J; j++) { el("option", {value: String(j)}, pick, j + (j === res.label ? " (predicted)" : "")); }
    pick.value = String(view.j);
    var stepLabel = el("label", {}, el("div", {}, controls), "iteration ");
    var step = el("input", {"class": "ci-x-iter", type: "range", min: 1, max: R, step: 1, value: view.r,
                            "aria-label": "routing iteration"}, stepLabel);
    var stepOut = el("output", {}, stepLabel);
    var who = el("p", {"class": "ci-x-who"}, controls);
    var below = el("div", {"class": "ci-row"}, box);
    var scatter = el("canvas", {"class": "ci-x-scatter", width: 360, height: 360}, below);
    var sideBox = el("div", {"class": "ci-x-side"}, below);
    el("small", {}, sideBox, "The selected capsule's c_ij (dashed: 1/" + J + ", an even split); under each bar: j, " +
       "c_ij and the length of the vote |\u00fb_j|i|.");
    var bars = el("div", {"class": "ci-x-bars"}, sideBox), ref = el("div", {"class": "ci-x-ref"}, bars), cols = [];
    for (j = 0; j < J; j++) { cols.push(el("span", {"class": "ci-x-bar"}, bars)); }
    var names = el("div", {"class": "ci-x-cols"}, sideBox), cs = el("div", {"class": "ci-x-cols ci-x-c"}, sideBox);
    var votes = el("div", {"class": "ci-x-cols"}, sideBox);
    for (j = 0; j < J; j++) { el("span", {}, names, String(j)); el("span", {}, cs); el("span", {}, votes); }
    var caption = el("p", {"class": "ci-x-caption"}, sideBox);
    var pca = null, pts = null, marks = null, cmax = 0;         // marks: v_j after each iteration, then 0

    function project(x, at) {                          // a 16-D vector -> its 2 coordinates (y down)
      var p = [0, 0];
      for (var k = 0; k < 2; k++) {
        for (var d = 0; d < D; d++) { p[k] += (x[at + d] - pca.mean[d]) * pca.axes[k][d]; }
      }
      return [p[0], -p[1]];
    }
    function chooseClass() {                           // the projection and scale, fixed across iterations
      var x = res.votes.subarray(view.j * N * D, (view.j + 1) * N * D), r, k, d;
      pca = principalAxes(x, N, D);
      var last = res.routed[R - 1], s = [0, 0];        // axes signed so that the last v_j lies up and right
      for (k = 0; k < 2; k++) { for (d = 0; d < D; d++) { s[k] += (last[view.j * D + d] - pca.mean[d]) * pca.axes[k][d]; } }
      for (k = 0; k < 2; k++) { if (s[k] < 0) { for (d = 0; d < D; d++) { pca.axes[k][d] *= -1; } } }
      view.axes = pca.axes;                            // read by the browser test
      var raw = [], lo = [Infinity, Infinity], hi = [-Infinity, -Infinity];
      for (i = 0; i < N; i++) { raw.push(project(x, i * D)); }
      marks = res.routed.map(function (v) { return project(v, view.j * D); });
      marks.push(project(new Float32Array(D), 0));    // the origin, last
      raw.concat(marks).forEach(function (p) {
        for (k = 0; k < 2; k++) { lo[k] = Math.min(lo[k], p[k]); hi[k] = Math.max(hi[k], p[k]); }
      });
      // One scale for both axes, so that angles and distances look as they are; the box fills 330 px.
      var fit = 330 / Math.max(hi[0] - lo[0], hi[1] - lo[1], 1e-6);
      function place(p) { return [180 + fit * (p[0] - (lo[0] + hi[0]) / 2), 180 + fit * (p[1] - (lo[1] + hi[1]) / 2)]; }
      pts = raw.map(place);
      marks = marks.map(place);
      cmax = 0;
      for (r = 0; r < R; r++) { for (i = 0; i < N; i++) { cmax = Math.max(cmax, res.couplings[r][i * J + view.j]); } }
    }
    function drawGrid() {
      var ctx = grid.getContext("2d");
      ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, grid.width, grid.height);
      for (i = 0; i < N; i++) {
        var t = Math.floor(i / G), cell = i % G, x = (t % PER_ROW) * PITCH + (cell % side) * CELL;
        var y = Math.floor(t / PER_ROW) * PITCH + Math.floor(cell / side) * CELL, g = Math.round(255 * (longest - lengths[i]) / span);
        ctx.fillStyle = "rgb(" + g + "," + g + "," + g + ")";
        ctx.fillRect(x, y, CELL, CELL);
        if (i === view.i) { ctx.strokeStyle = "#e22"; ctx.lineWidth = 2; ctx.strokeRect(x + 1, y + 1, CELL - 2, CELL - 2); }
      }
    }
    function draw() {
      var c = res.couplings[view.r - 1], v = res.routed[view.r - 1], ctx = scatter.getContext("2d"), k;
      stepOut.textContent = "\u00a0" + view.r + " of " + R;
      view.radii = new Float32Array(N);
      ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, 360, 360);
      ctx.fillStyle = "rgba(40, 80, 170, 0.3)";
      for (i = 0; i < N; i++) {
        view.radii[i] = Math.max(0.5, 7 * c[i * J + view.j] / cmax);       // the largest c of any iteration: 7 px
        ctx.beginPath(); ctx.arc(pts[i][0], pts[i][1], view.radii[i], 0, 2 * Math.PI); ctx.fill();
      }
      var o = marks[R], at = marks[view.r - 1];
      ctx.strokeStyle = "#e22"; ctx.lineWidth = 1;
      ctx.beginPath(); ctx.moveTo(o[0], o[1]); ctx.lineTo(at[0], at[1]); ctx.stroke();
      ctx.fillStyle = "#000"; ctx.fillRect(o[0] - 2, o[1] - 2, 4, 4); ctx.fillText("0", o[0] + 4, o[1] - 4);
      for (k = 0; k < view.r; k++) {                  // v_j after iterations 1 .. r
        var m = marks[k];
        ctx.strokeStyle = k === view.r - 1 ? "#e22" : "#aaa"; ctx.lineWidth = 2.5;
        ctx.beginPath(); ctx.moveTo(m[0] - 7, m[1] - 7); ctx.lineTo(m[0] + 7, m[1] + 7);
        ctx.moveTo(m[0] - 7, m[1] + 7); ctx.lineTo(m[0] + 7, m[1] - 7); ctx.stroke();
      }
      ctx.strokeStyle = "#000"; ctx.lineWidth = 1.5;   // the selected capsule's vote
      ctx.beginPath(); ctx.arc(pts[view.i][0], pts[view.i][1], view.radii[view.i] + 3, 0, 2 * Math.PI); ctx.stroke();
      // The selected capsule: its c_i at this iteration (full height: its largest c, at least 0.2).
      var full = 0.2, t = Math.floor(view.i / G), cell = view.i % G;
      for (k = 0; k < R; k++) { for (j = 0; j < J; j++) { full = Math.max(full, res.couplings[k][view.i * J + j]); } }
      who.textContent = "selected: capsule " + view.i + ", type " + (t + 1) + ", row " + (Math.floor(cell / side) + 1) +
        ", column " + (cell % side + 1) + "; length " + lengths[view.i].toFixed(3);
      ref.style.bottom = (80 * (1 / J) / full).toFixed(1) + "px";
      cols.forEach(function (bar, j) {
        var cij = c[view.i * J + j];
        bar.style.height = (80 * cij / full).toFixed(1) + "px";
        bar.className = j === view.j ? "ci-x-bar ci-x-on" : "ci-x-bar";
        bar.setAttribute("data-c", cij.toFixed(5));
        bar.title = "c_i" + j + " = " + cij.toFixed(3);
        cs.children[j].textContent = cij.toFixed(3).replace(/^0/, "");
        votes.children[j].textContent = norm(res.votes, (j * N + view.i) * D, D).toFixed(2);
      });
      // The caption: the range of c for class j, and how close to v_j the most-coupled votes lie.
      var order = [], lo = Infinity, hi = -Infinity, near = 0, all = 0, TOPN = Math.min(TOP, N);
      for (i = 0; i < N; i++) {
        var cj = c[i * J + view.j];
        lo = Math.min(lo, cj); hi = Math.max(hi, cj); order.push(i);
        all += angle(res.votes, (view.j * N + i) * D, v, view.j * D, D) / N;
      }
      order.sort(function (a, b) { return c[b * J + view.j] - c[a * J + view.j]; });
      for (k = 0; k < TOPN; k++) { near += angle(res.votes, (view.j * N + order[k]) * D, v, view.j * D, D) / TOPN; }
      caption.textContent = "iteration " + view.r + ": c for class " + view.j + " ranges " + lo.toFixed(3) + "\u2013" +
        hi.toFixed(3) + " (uniform " + (1 / J).toFixed(2) + "); the votes of the " + TOPN + " largest couplings lie at " +
        "a mean angle of " + near.toFixed(0) + "\u00b0 from v_" + view.j + ", all " + big(N) + " at " + all.toFixed(0) + "\u00b0.";
    }
    grid.addEventListener("click", function (ev) {
      var rect = grid.getBoundingClientRect();
      var x = (ev.clientX - rect.left) * grid.width / rect.width, y = (ev.clientY - rect.top) * grid.height / rect.height;
      var tx = Math.floor(x / PITCH), ty = Math.floor(y / PITCH), cx = Math.floor((x % PITCH) / CELL), cy = Math.floor((y % PITCH) / CELL);
      var t = ty * PER_ROW + tx;
      if (cx >= side || cy >= side || tx >= PER_ROW || t >= T) { return; }    // the gaps between tiles
      view.i = t * G + cy * side + cx;
      drawGrid(); draw(); changed();
    });
    pick.addEventListener("change", function () { view.j = Number(pick.value); chooseClass(); draw(); changed(); });
    step.addEventListener("input", function () { view.r = Number(step.value); draw(); changed(); });
    chooseClass(); drawGrid(); draw();
    return view;
  }

  // ------------------------------------------------------------------ the panel
  function Panel(root) {
    var data = JSON.parse(root.querySelector("script.capsedu-inpage-data").textContent);
    var D = data.digit_dim, digits = bytesToImages(data.digits.images), samples = bytesToImages(data.samples.images);
    var state = {decoder: null, encoder: null, capsule: null, label: 0, drawn: null};
    root.querySelector(".capsedu-inpage-note").hidden = true;

    // Part 1: the decoder under 16 sliders
    var part = el("div", {"class": "ci-part ci-decoder"}, root);
    el("strong", {}, part, "The decoder in this page");
    var loadDec = el("button", {"class": "ci-load-decoder", type: "button"}, el("p", {}, part),
                     "Load the decoder (" + mb(data.files[data.decoder]) + ")");
    var body = el("div", {"class": "ci-body", hidden: ""}, part);
    var pick = el("select", {"class": "ci-digit", "aria-label": "test digit"}, el("label", {}, body, "digit "));
    data.digits.labels.forEach(function (y, n) { el("option", {value: String(n)}, pick, "test digit #" + n + " (predicted " + y + ")"); });
    var row = el("div", {"class": "ci-row"}, body);
    function framed(cls, caption) {                   // a 28 x 28 canvas with a caption under it
      var fig = el("figure", {}, row), cv = el("canvas", {"class": cls + " ci-28", width: 28, height: 28}, fig);
      el("figcaption", {}, fig, caption);
      return cv;
    }
    var original = framed("ci-original", "input"), recon = framed("ci-recon", "decoded from the capsule");
    var info = el("div", {}, row);
    el("span", {}, info, "capsule length ");
    var length = el("output", {"class": "ci-length"}, info);
    var tooLong = el("p", {"class": "ci-too-long", hidden: ""}, info,
                     "Longer than 1: no squashed capsule is, so the decoder never saw one like it.");
    var reset = el("button", {"class": "ci-reset", type: "button"}, el("div", {}, info), "reset");
    var grid = el("div", {"class": "ci-sliders"}, body), sliders = [];
    for (var d = 0; d < D; d++) {
      var label = el("label", {}, grid, String(d + 1) + " ");
      sliders.push(el("input", {type: "range", min: -data.span, max: data.span, step: 0.01, value: 0,
                                "data-dim": d, "aria-label": "dimension " + (d + 1)}, label));
      el("output", {}, label, "+0.00");
    }

    function redraw() {                                // the capsule plus the sliders, decoded
      var caps = new Float32Array(state.capsule);
      sliders.forEach(function (s, k) {
        caps[k] += Number(s.value);
        s.nextSibling.textContent = (Number(s.value) >= 0 ? "+" : "") + Number(s.value).toFixed(2);
      });
      var pixels = decode(state.decoder, caps, state.label);
      show(recon, pixels);
      if (pick.value === "drawn") { show(redrawn, pixels); }        // beside the drawing too
      var len = norm(caps, 0, D);
      length.textContent = len.toFixed(3);
      tooLong.hidden = len <= 1;                       // the sliders can push it past the squash's range
      save();
    }
    function choose() {                                // a test digit, or the reader's drawing
      var n = pick.value;
      if (n === "drawn") {
        state.capsule = state.drawn.capsule; state.label = state.drawn.label; show(original, state.drawn.image);
      } else {
        state.capsule = Float32Array.from(data.digits.capsules[n]); state.label = data.digits.labels[n];
        show(original, digits[n]);
      }
      redraw();
    }
    function loadDecoder() {
      if (!state.decoderPromise) {
        loadDec.disabled = true; loadDec.textContent = "loading the decoder...";
        state.decoderPromise = fetchWeights(data.decoder).then(function (w) {
          state.decoder = w; loadDec.parentNode.hidden = true; body.hidden = false; choose();
        }, function (err) { loadDec.textContent = "could not load the decoder: " + err.message; });
      }
      return state.decoderPromise;
    }
    loadDec.addEventListener("click", loadDecoder);
    pick.addEventListener("change", choose);
    sliders.forEach(function (s) { s.addEventListener("input", redraw); });
    reset.addEventListener("click", function () { sliders.forEach(function (s) { s.value = 0; }); redraw(); });

    // Part 2: draw a digit for the whole network
    var net = el("div", {"class": "ci-part ci-network"}, root);
    el("strong", {}, net, "Draw a digit for the whole network");
    var loadNet = el("button", {"class": "ci-load-network", type: "button"}, el("p", {}, net),
                     "Load the network (" + mb(data.files[data.encoder]) + ", and the decoder's " +
                     mb(data.files[data.decoder]) + " if not loaded)");
    var row2 = el("div", {"class": "ci-row"}, net);
    var pad = el("canvas", {"class": "ci-draw", width: 280, height: 280, title: "draw a digit here"}, row2);
    var out = el("div", {}, row2);
    var seen = el("div", {"class": "ci-row"}, out);
    var input = el("canvas", {"class": "ci-input ci-28", width: 28, height: 28, title: "what the network reads"}, seen);
    var redrawn = el("canvas", {"class": "ci-redrawn ci-28", width: 28, height: 28, title: "decoded (the sliders above move it)"}, seen);
    el("small", {}, out, "left: what the network reads (28 \u00d7 28); right: decoded from its capsule");
    var verdict = el("p", {"class": "ci-verdict"}, out, "Draw a digit (mouse or touch), or load a sample.");
    var bars = el("div", {"class": "ci-lengths"}, out);
    var coupling = el("div", {"class": "ci-coupling"}, net);
    var tools = el("p", {}, net);
    var clear = el("button", {"class": "ci-clear", type: "button"}, tools, "clear");
    el("span", {}, tools, " samples: ");
    var readings = data.samples.predicted, truths = data.samples.labels;
    samples.forEach(function (img, n) {                 // "3 \u2192 7": a 3 that the network reads as 7
      var name = (truths ? truths[n] + " \u2192 " : "\u2192 ") + readings[n];
      el("button", {"class": "ci-sample", type: "button", "data-sample": n,
                    title: truths ? "a " + truths[n] + ", read as " + readings[n] : "read as " + readings[n]},
         tools, name)
        .addEventListener("click", function () { take(img, "s" + n); });
    });
    var explore = el("div", {"class": "ci-explorer"}, net);   // filled when a digit has been run
    var ink = pad.getContext("2d");
    function wipe() { ink.fillStyle = "#000"; ink.fillRect(0, 0, pad.width, pad.height); }
    function drawSample(img) {                          // the sample, enlarged 10x, as if drawn
      var tmp = el("canvas", {width: 28, height: 28});
      show(tmp, img);
      ink.imageSmoothingEnabled = false;
      ink.drawImage(tmp, 0, 0, pad.width, pad.height);
    }
    function take(image, code) {                        // an input for the network, and its code for the URL
      drawSample(image); state.input = code; run(image);
    }
    function run(image) {                               // the network on 784 pixels, when loaded
      if (!image) { return; }
      if (!state.encoder) { verdict.textContent = "Load the network first (the button above)."; state.pending = image; return; }
      var start = performance.now(), res = capsnet(state.encoder, image), ms = performance.now() - start;
      show(input, image);
      verdict.textContent = "prediction: " + res.label + " (forward pass " + ms.toFixed(0) + " ms)";
      verdict.setAttribute("data-ms", ms.toFixed(1));
      bars.setAttribute("data-lengths", JSON.stringify(res.lengths));
      bars.textContent = "";
      res.lengths.forEach(function (len, j) {
        var line = el("div", {"class": j === res.label ? "ci-bar ci-top" : "ci-bar"}, bars, j + " ");
        el("span", {style: "width:" + (100 * len).toFixed(1) + "px"}, line);
        el("small", {}, line, " " + len.toFixed(3));
      });
      showCoupling(res);
      root.capsedu = {result: res, explorer: Explorer(explore, res, state.explore, save)};   // read by the browser test
      state.explore = null;                             // a restored view is for the restored input only
      state.drawn = {capsule: res.capsules.slice(res.label * D, res.label * D + D), label: res.label, image: image};
      var opt = pick.querySelector('option[value="drawn"]') || el("option", {value: "drawn"}, pick);
      opt.textContent = "your digit (predicted " + res.label + ")";
      pick.value = "drawn";
      sliders.forEach(function (s) { s.value = 0; });
      if (state.decoder) { choose(); }
      save();
    }
    // c_ij of the last routing iteration, averaged over the capsule types at each grid cell: one
    // small map per digit class j. Grey is 1/J (each capsule's vote spread evenly), red more, blue
    // less; the colours saturate at the largest departure from 1/J of this digit, stated above them.
    function showCoupling(res) {
      var J = data.num_classes, G = res.cells, T = res.types, side = Math.round(Math.sqrt(G));
      var maps = [], spread = 1e-6, j, cell;
      for (j = 0; j < J; j++) {
        var m = new Float32Array(G);
        for (cell = 0; cell < G; cell++) {
          for (var t = 0; t < T; t++) { m[cell] += res.coupling[(t * G + cell) * J + j] / T; }
          spread = Math.max(spread, Math.abs(m[cell] - 1 / J));
        }
        maps.push(m);
      }
      coupling.textContent = "";
      el("p", {"class": "ci-coupling-note"}, coupling, "Where each part of the image sends its vote: one map " +
         "per digit class j, each cell the coupling c_ij of the last routing iteration, averaged over the " + T +
         " capsule types at that cell of the " + side + " \u00d7 " + side + " grid. Grey is 1/" + J +
         ", an even split; red is up to 1/" + J + " + " + spread.toFixed(3) + ", blue down to 1/" + J +
         " \u2212 " + spread.toFixed(3) + ". The colours are stretched: routing barely moves the couplings " +
         "from an even split, by at most \u00b1" + spread.toFixed(3) + " here. Under each map: its mean c_ij.");
      var row = el("div", {"class": "ci-row"}, coupling);
      maps.forEach(function (m, j) {
        var fig = el("figure", {}, row), cv = el("canvas", {width: side, height: side, "class": "ci-map"}, fig);
        var ctx = cv.getContext("2d"), img = ctx.createImageData(side, side), mean = 0;
        for (var cell = 0; cell < G; cell++) {
          var x = (m[cell] - 1 / J) / spread, k = 4 * cell;                    // in [-1, 1]
          img.data[k] = Math.round(200 + 55 * Math.max(x, 0) - 200 * Math.max(-x, 0));
          img.data[k + 1] = Math.round(200 - 200 * Math.abs(x));
          img.data[k + 2] = Math.round(200 + 55 * Math.max(-x, 0) - 200 * Math.max(x, 0));
          img.data[k + 3] = 255;
          mean += m[cell] / G;
        }
        ctx.putImageData(img, 0, 0);
        el("figcaption", {}, fig, j + ": " + mean.toFixed(3));
      });
    }
    function loadNetwork() {
      loadNet.disabled = true; loadNet.textContent = "loading the network...";
      return Promise.all([fetchWeights(data.encoder), loadDecoder()]).then(function (w) {
        state.encoder = w[0]; loadNet.parentNode.hidden = true;
        if (state.pending) { run(state.pending); }
      }, function (err) { loadNet.textContent = "could not load the network: " + err.message; });
    }
    loadNet.addEventListener("click", loadNetwork);
    // Drawing: round strokes about 2 MNIST pixels wide; the network runs when the stroke ends.
    var last = null;
    function point(ev) { var r = pad.getBoundingClientRect(); return [(ev.clientX - r.left) * pad.width / r.width, (ev.clientY - r.top) * pad.height / r.height]; }
    pad.addEventListener("pointerdown", function (ev) { last = point(ev); pad.setPointerCapture(ev.pointerId); ev.preventDefault(); });
    pad.addEventListener("pointermove", function (ev) {
      if (!last) { return; }
      var p = point(ev);
      ink.strokeStyle = "#fff"; ink.lineWidth = 22; ink.lineCap = ink.lineJoin = "round";
      ink.beginPath(); ink.moveTo(last[0], last[1]); ink.lineTo(p[0], p[1]); ink.stroke();
      last = p;
    });
    pad.addEventListener("pointerup", function () {
      var image = last && mnistLike(pad);
      last = null;
      if (image) { var code = pack(image); take(unpack(code), "d" + code); }   // read as the URL keeps it
    });
    clear.addEventListener("click", function () { wipe(); state.pending = null; });
    wipe();

    // The view in the URL (capsedu.js): ci-input "s<sample>" or "d<packed drawing>", ci-digit the
    // digit the sliders move, ci-dims the 16 sliders in hundredths, ci-explore the explorer's j_r_i.
    var url = window.capseduState, restoring = false;
    function save() {
      if (!url || restoring) { return; }
      url.set("ci-digit", pick.value);
      url.set("ci-dims", sliders.map(function (s) { return Math.round(s.value * 100); }).join("_"));
      if (state.input) { url.set("ci-input", state.input); }
      var x = root.capsedu && root.capsedu.explorer;
      if (x) { url.set("ci-explore", [x.j, x.r, x.i].join("_")); }
    }
    function restore() {                                // loads the weights the saved view needs
      var input = url.get("ci-input"), digit = url.get("ci-digit"), dims = url.get("ci-dims");
      var explore = (url.get("ci-explore") || "").split("_").map(Number), image = null;
      if (input && input[0] === "s") { image = samples[Number(input.slice(1))]; }
      if (input && input[0] === "d") { try { image = unpack(input.slice(1)); } catch (e) { image = null; } }
      if (!image && digit === undefined && dims === undefined) { return; }
      restoring = true;
      state.explore = {j: explore[0], r: explore[1], i: explore[2]};
      if (image) { drawSample(image); state.input = input; state.pending = image; }
      (image ? loadNetwork() : loadDecoder()).then(function () {
        restoring = false;
        if (!state.decoder) { return; }
        if (/^(\d+|drawn)$/.test(digit) && pick.querySelector('option[value="' + digit + '"]')) { pick.value = digit; }
        (dims || "").split("_").forEach(function (v, d) { if (sliders[d] && isFinite(v)) { sliders[d].value = v / 100; } });
        choose();
      });
    }
    if (url) { restore(); }
  }

  var style = document.createElement("style");
  style.textContent = ".capsedu-inpage .ci-part { margin: 1em 0; } .capsedu-inpage .ci-row { display: flex; flex-wrap: wrap; gap: 1em; align-items: flex-start; }" +
    " .capsedu-inpage .ci-28 { width: 140px; height: 140px; image-rendering: pixelated; }" +
    " .capsedu-inpage .ci-draw { width: 280px; height: 280px; touch-action: none; border: 1px solid #888; cursor: crosshair; }" +
    " .capsedu-inpage .ci-sliders { display: grid; grid-template-columns: repeat(auto-fill, minmax(20em, 1fr)); gap: 0.3em 1.5em; font-size: 0.9em; }" +
    " .capsedu-inpage .ci-sliders label { display: flex; align-items: center; gap: 0.5em; }" +
    " .capsedu-inpage .ci-sliders input { flex: 1; min-width: 12em; }" +          // wide: fine steps of 0.01
    " .capsedu-inpage .ci-too-long { color: #b30; max-width: 16em; font-size: 0.9em; }" +
    " .capsedu-inpage .ci-bar { font-family: monospace; font-size: 0.85em; } .capsedu-inpage .ci-bar span { display: inline-block; height: 0.7em; background: #888; }" +
    " .capsedu-inpage .ci-top span { background: #c33; } .capsedu-inpage .ci-map { width: 108px; height: 108px; image-rendering: pixelated; }" +
    " .capsedu-inpage figure { margin: 0; text-align: center; font-size: 0.8em; }" +
    " .capsedu-inpage .ci-x-note, .capsedu-inpage .ci-x-caption, .capsedu-inpage .ci-x-who { font-size: 0.85em; }" +
    " .capsedu-inpage .ci-x-grid { cursor: pointer; } .capsedu-inpage .ci-x-who { max-width: 22em; }" +
    " .capsedu-inpage .ci-x-scatter { width: 360px; height: 360px; border: 1px solid #ccc; }" +
    " .capsedu-inpage .ci-x-side { width: 340px; }" +             // beside the scatter in a 740 px column
    " .capsedu-inpage .ci-x-bars { position: relative; display: flex; gap: 2px; align-items: flex-end; height: 80px;" +
    " border-bottom: 1px solid #888; margin-top: 0.3em; } .capsedu-inpage .ci-x-bar { width: 32px; background: #88a; }" +
    " .capsedu-inpage .ci-x-on { background: #c33; } .capsedu-inpage .ci-x-ref { position: absolute; left: 0; right: 0;" +
    " border-top: 1px dashed #000; } .capsedu-inpage .ci-x-cols { display: flex; gap: 2px; font: 0.7em monospace; }" +
    " .capsedu-inpage .ci-x-cols span { width: 32px; text-align: center; }";
  document.head.appendChild(style);
  function start() { Array.prototype.forEach.call(document.querySelectorAll(".capsedu-inpage"), Panel); }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", start); } else { start(); }
})();
