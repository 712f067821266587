import { CatalogPublication } from '../../control-plane/catalog/catalog-publication';
import { CatalogSnapshotMessage } from '../../control-plane/catalog/catalog-store';

const version = (name: string): CatalogSnapshotMessage => ({ version: name, routes: [], tool_name_separator: '__', tools_list_page_size: 0 });

/** A promise the test settles when it chooses: Envoy's answer, or the routes' publication. */
function later(): { promise: Promise<void>; settle: () => void } {
  let settle!: () => void;
  const promise = new Promise<void>((resolve) => (settle = resolve));
  return { promise, settle };
}

const settled = () => new Promise((resolve) => setImmediate(resolve));

describe('the catalog the sidecars are sent', () => {
  it('is a version only once its routes are published and the Envoys answered them', async () => {
    const answers = later();
    const publication = new CatalogPublication(version('v0'), () => answers.promise);
    const sent: string[] = [];
    publication.on('change', (snapshot) => sent.push(snapshot.version));
    const routes = later();
    publication.offer(version('v1'), routes.promise);
    await settled();
    expect(publication.current().version).toBe('v0');
    routes.settle();
    await settled();
    expect(sent).toEqual([]);
    answers.settle();
    await settled();
    expect(sent).toEqual(['v1']);
    expect(publication.current().version).toBe('v1');
  });

  it('sends versions in order and skips one overtaken before its routes were published', async () => {
    const publication = new CatalogPublication(version('v0'), () => Promise.resolve());
    const sent: string[] = [];
    publication.on('change', (snapshot) => sent.push(snapshot.version));
    const first = later();
    publication.offer(version('v1'), first.promise);
    publication.offer(version('v2'), Promise.resolve());
    await settled();
    expect(sent).toEqual([]);
    first.settle();
    await settled();
    expect(sent).toEqual(['v2']);
  });
});
