// The conversation page's service worker: it keeps the page's own files so
// the page opens while the replyd box restarts or the network is down, and
// then says "replyd is not reachable" itself. Files come from the network
// first (so an updated replyd serves its new page at once) and from the
// cache only when the network fails. API calls are never cached.
const CACHE = 'replyd-app-v3';
const SHELL = ['./', 'index.html', 'app.css', 'main.js', 'client.js', 'recorder.js', 'wav-worklet.js',
  'settings.js', 'speech.js', 'access.js', 'spell.js', 'strings.js', 'letters.js', 'live.js', 'i18n/i18n.js', 'i18n/en.json', 'manifest.webmanifest', 'icon.svg', 'icon-192.png', 'icon-512.png'];
const NETWORK_WAIT_MS = 4000;

self.addEventListener('install', (ev) => {
  ev.waitUntil(caches.open(CACHE).then((c) => c.addAll(SHELL)).then(() => self.skipWaiting()));
});

self.addEventListener('activate', (ev) => {
  ev.waitUntil(caches.keys()
    .then((keys) => Promise.all(keys.filter((k) => k !== CACHE).map((k) => caches.delete(k))))
    .then(() => self.clients.claim()));
});

function fromNetwork(req) {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('slow network')), NETWORK_WAIT_MS);
    fetch(req).then((res) => { clearTimeout(t); resolve(res); }, (err) => { clearTimeout(t); reject(err); });
  });
}

self.addEventListener('fetch', (ev) => {
  const req = ev.request;
  const url = new URL(req.url);
  const scope = new URL(self.registration.scope);
  if (req.method !== 'GET' || url.origin !== scope.origin || !url.pathname.startsWith(scope.pathname)) return;
  ev.respondWith((async () => {
    try {
      const res = await fromNetwork(req);
      if (res.ok) {
        const copy = res.clone();
        caches.open(CACHE).then((c) => c.put(req, copy));
      }
      return res;
    } catch (err) {
      const cached = await caches.match(req, { ignoreSearch: true })
        || (req.mode === 'navigate' ? await caches.match('index.html') : undefined);
      if (cached) return cached;
      throw err;
    }
  })());
});
