// Mask editor: the image with its mask as a red overlay; brush adds void pixels, eraser removes
// them. On submit the mask goes to the server as a PNG data URL (white = void, black = background),
// with the seconds spent on this image.
(function () {
  const editor = document.getElementById("editor");
  if (!editor) return;
  const SCALE = 6;
  const started = performance.now();
  const canvas = document.getElementById("canvas");
  const ctx = canvas.getContext("2d");
  let w = 0, h = 0, mask = null, grey = null, drawing = false;

  function load(src) {
    return new Promise((resolve, reject) => {
      const img = new Image();
      img.onload = () => resolve(img);
      img.onerror = reject;
      img.src = src;
    });
  }
  function pixels(img) {
    const c = document.createElement("canvas");
    c.width = img.width; c.height = img.height;
    const g = c.getContext("2d");
    g.drawImage(img, 0, 0);
    return g.getImageData(0, 0, img.width, img.height).data;
  }
  function render() {
    const out = ctx.createImageData(w, h);
    const show = document.getElementById("show-mask").checked;
    for (let i = 0; i < w * h; i++) {
      const v = grey[i * 4];
      const m = show && mask[i];
      out.data[i * 4] = m ? Math.round(v * 0.45 + 255 * 0.55) : v;
      out.data[i * 4 + 1] = m ? Math.round(v * 0.45) : v;
      out.data[i * 4 + 2] = m ? Math.round(v * 0.45) : v;
      out.data[i * 4 + 3] = 255;
    }
    ctx.putImageData(out, 0, 0);
  }
  function paint(event) {
    const box = canvas.getBoundingClientRect();
    const x = Math.floor((event.clientX - box.left) / box.width * w);
    const y = Math.floor((event.clientY - box.top) / box.height * h);
    const r = Number(document.getElementById("size").value) - 1;
    const value = document.getElementById("tool-eraser").checked ? 0 : 1;
    for (let dy = -r; dy <= r; dy++) {
      for (let dx = -r; dx <= r; dx++) {
        const px = x + dx, py = y + dy;
        if (px >= 0 && py >= 0 && px < w && py < h && dx * dx + dy * dy <= r * r) mask[py * w + px] = value;
      }
    }
    render();
  }
  function maskPng() {
    const c = document.createElement("canvas");
    c.width = w; c.height = h;
    const g = c.getContext("2d");
    const out = g.createImageData(w, h);
    for (let i = 0; i < w * h; i++) {
      const v = mask[i] ? 255 : 0;
      out.data[i * 4] = v; out.data[i * 4 + 1] = v; out.data[i * 4 + 2] = v; out.data[i * 4 + 3] = 255;
    }
    g.putImageData(out, 0, 0);
    return c.toDataURL("image/png");
  }
  Promise.all([load(editor.dataset.image), load(editor.dataset.mask)]).then(([img, m]) => {
    w = img.width; h = img.height;
    canvas.width = w; canvas.height = h;
    canvas.style.width = w * SCALE + "px"; canvas.style.height = h * SCALE + "px";
    grey = pixels(img);
    const mp = pixels(m);
    mask = new Uint8Array(w * h);
    for (let i = 0; i < w * h; i++) mask[i] = mp[i * 4] > 127 ? 1 : 0;
    render();
    editor.dataset.ready = "1";
  });
  canvas.addEventListener("pointerdown", (e) => { drawing = true; canvas.setPointerCapture(e.pointerId); paint(e); });
  canvas.addEventListener("pointermove", (e) => { if (drawing) paint(e); });
  canvas.addEventListener("pointerup", () => { drawing = false; });
  document.getElementById("show-mask").addEventListener("change", render);
  document.getElementById("decide-form").addEventListener("submit", () => {
    document.getElementById("seconds").value = ((performance.now() - started) / 1000).toFixed(2);
    if (mask) document.getElementById("mask-data").value = maskPng();
  });
})();
