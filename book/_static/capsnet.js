/* capsnet.js: chapter 6's CapsNet computed in the page, in plain JavaScript (no library).

   - Weights: two files written when the book is built (capsedu/figures/inpage.py), fetched
     only when the reader asks: the decoder (float16) and the encoder (int8 + scales).
   - decode(): the decoder, 16-D capsule of one class -> 512 -> 1024 -> 784 pixels.
   - capsnet(): the whole forward pass: conv1, the primary capsules, the 1,152 x 10 votes
     u_hat = W_ij u_i, and dynamic routing (3 iterations), as capsedu.core does it.
   - mnistLike(): a drawing -> 28 x 28 as MNIST's digits are made: the digit scaled into a
     20 x 20 box, then placed so that its centre of mass is the image's centre.
   - The panel: 16 sliders over a capsule, and a canvas to draw on.
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

  // image (784) in [0, 1] -> {capsules (J*D), lengths (J), coupling (N*J, last iteration), label}
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
    for (var r = 0; r < cfg.iterations; r++) {
      for (i = 0; i < N; i++) {                                               // softmax over j
        var max = -Infinity, total = 0;
        for (j = 0; j < J; j++) { max = Math.max(max, b[i * J + j]); }
        for (j = 0; j < J; j++) { c[i * J + j] = Math.exp(b[i * J + j] - max); total += c[i * J + j]; }
        for (j = 0; j < J; j++) { c[i * J + j] /= total; }
      }
      v.fill(0);
      for (j = 0; j < J; j++) {
        for (i = 0; i < N; i++) {
          var cij = c[i * J + j], at = (j * N + i) * D;
          for (d = 0; d < D; d++) { v[j * D + d] += cij * uhat[at + d]; }
        }
        squash(v, j * D, D, cfg.squash_k);
      }
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
    return {capsules: v, lengths: lengths, coupling: c, label: label, types: T, cells: G};
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

  function el(tag, attrs, parent, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) { node.textContent = text; }
    if (parent) { parent.appendChild(node); }
    return node;
  }

  function mb(bytes) { return (bytes / 1e6).toFixed(1) + " MB"; }

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
        .addEventListener("click", function () { drawSample(img); run(img); });
    });
    var ink = pad.getContext("2d");
    function wipe() { ink.fillStyle = "#000"; ink.fillRect(0, 0, pad.width, pad.height); }
    function drawSample(img) {                          // the sample, enlarged 10x, as if drawn
      var tmp = el("canvas", {width: 28, height: 28});
      show(tmp, img);
      ink.imageSmoothingEnabled = false;
      ink.drawImage(tmp, 0, 0, pad.width, pad.height);
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
      state.drawn = {capsule: res.capsules.slice(res.label * D, res.label * D + D), label: res.label, image: image};
      var opt = pick.querySelector('option[value="drawn"]') || el("option", {value: "drawn"}, pick);
      opt.textContent = "your digit (predicted " + res.label + ")";
      pick.value = "drawn";
      sliders.forEach(function (s) { s.value = 0; });
      if (state.decoder) { choose(); }
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
    loadNet.addEventListener("click", function () {
      loadNet.disabled = true; loadNet.textContent = "loading the network...";
      Promise.all([fetchWeights(data.encoder), loadDecoder()]).then(function (w) {
        state.encoder = w[0]; loadNet.parentNode.hidden = true;
        if (state.pending) { run(state.pending); }
      }, function (err) { loadNet.textContent = "could not load the network: " + err.message; });
    });
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
    pad.addEventListener("pointerup", function () { if (last) { last = null; run(mnistLike(pad)); } });
    clear.addEventListener("click", function () { wipe(); state.pending = null; });
    wipe();
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
    " .capsedu-inpage figure { margin: 0; text-align: center; font-size: 0.8em; }";
  document.head.appendChild(style);
  function start() { Array.prototype.forEach.call(document.querySelectorAll(".capsedu-inpage"), Panel); }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", start); } else { start(); }
})();
